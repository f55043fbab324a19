"""Ligatures read as typed: a ligature character a browser set apart in a fallback font, and
the private-use "fi" and "fl" some fonts' maps give, joined to their words again (issue 40)."""

from __future__ import annotations

import pytest

from crag.ingestion.formats.pdf_fonts import join_split_ligatures, ligature_text


@pytest.mark.parametrize(("read", "typed"), [
    # Chromium with Liberation: a fallback font's run each, a space either side (pypdf's)
    ("The o ﬃ cial Hausdor ﬀ  dimension, by the e ﬀ ort.", "The oﬃcial Hausdorﬀ dimension, by the eﬀort."),
    ("measured by Hausdor ﬀ .\nNext", "measured by Hausdorﬀ.\nNext"),
    ("signi ﬁ cant", "signiﬁcant"),
    ("the ﬁ rst and a ﬂ ow", "the ﬁrst and a ﬂow"),  # the space before is the text's own
    ("\uf001rst, a \uf001ne \uf002ow", "first, a fine flow"),  # Liberation's map for its fi and fl
])
def test_a_ligature_set_apart_joins_its_word_again(read: str, typed: str) -> None:
    assert join_split_ligatures(read) == typed


def test_text_whose_ligatures_sit_in_their_words_is_left_as_it_is() -> None:
    for text in ("The oﬃcial Hausdorﬀ dimension, the ﬁrst.", "\uf001 stands alone", "ﬀ\n12 ﬁ"):
        assert join_split_ligatures(text) == text


def test_a_glyph_name_longer_than_any_ligature_names_none() -> None:
    assert ligature_text("/f_f_i") == "ffi"
    assert ligature_text("/" + "_".join("abcdefghijklmnopqrstuvwxyz" * 12)) is None
