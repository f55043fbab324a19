"""Where things are, from the repository's root, so that a test reads the same files wherever
in tests/ it lives."""

from __future__ import annotations

from pathlib import Path

import crag

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"  # the tests' own data, committed
DOCUMENTS = DATA / "documents"  # documents in every format (written by documents/make_fixtures.py)
BENCHMARKS = REPO / "benchmarks"
SAMPLES = Path(crag.__file__).parent / "sample_data"  # the bundled handbook and sample 'web'
SHARED_DATA = REPO.parent / "shared" / "data"  # the shared dev sets, where present
