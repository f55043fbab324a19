"""Marks a test module puts on itself: `pytestmark = BROWSER`."""

from __future__ import annotations

import pytest

from crag.app.render.browser import find_chromium

# A test module that opens pages or prints PDFs in Chromium.
BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="no Chromium: install Debian's chromium package (apt-get install -y chromium), as .ci/run does",
    ),
]
