"""Metadata held to a quarter of a chunk: short values whole, long ones cut at a word, what
cannot be cut kept out of what is embedded and shown."""

from __future__ import annotations

from llama_index.core.schema import Document, MetadataMode
from llama_index.core.utils import get_tokenizer

from crag.ingestion.chunk_metadata import HIDDEN_KEYS, fit_metadata, hide

TOKENS = get_tokenizer()


def shown(document: Document) -> str:
    return document.get_metadata_str(MetadataMode.EMBED)


def test_metadata_that_fits_is_left_as_it_is() -> None:
    document = Document(text="x", metadata={"title": "Living with the Helio H10", "section": "Charge cycles"})
    fit_metadata(document, 64, TOKENS)
    assert document.metadata == {"title": "Living with the Helio H10", "section": "Charge cycles"}
    assert document.excluded_embed_metadata_keys == []


def test_a_long_value_is_cut_at_a_word_and_the_short_ones_stay_whole() -> None:
    document = Document(text="x", metadata={"title": "Helio H10", "author": "Ambrose Bierce, " * 120,
                                            "scores": [1, 2, 3] * 200, "url": "https://example.org/" + "a" * 3000})
    hide(document, HIDDEN_KEYS)
    fit_metadata(document, 64, TOKENS)
    assert len(TOKENS(shown(document))) <= 64 and len(TOKENS(document.get_metadata_str(MetadataMode.LLM))) <= 64
    assert document.metadata["title"] == "Helio H10"
    assert document.metadata["author"].startswith("Ambrose Bierce, Ambrose") and document.metadata["author"].endswith("…")
    assert "scores" not in shown(document) and "url" not in shown(document)
    assert document.metadata["url"].endswith("a" * 3000)  # kept for the citation


def test_many_keys_that_cannot_all_fit_are_hidden_until_they_do() -> None:
    document = Document(text="x", metadata={f"a_rather_long_key_name_{n}": "value" for n in range(40)})
    fit_metadata(document, 64, TOKENS)
    assert 0 < len(TOKENS(shown(document))) <= 64
