"""Sentences that survive abbreviations and numbering, tables cut into rows, lists kept whole,
and spans that ingest stores and a question reads back."""

from __future__ import annotations

import re

import pytest

from crag.text import LIST_CHARS, sentence_spans, sentences


@pytest.mark.parametrize(
    "text",
    [
        "Use a dense index, i.e. one vector per chunk.",
        "Some readers (e.g. pypdf) return text.",
        "It costs approx. five dollars, cf. the price list.",
        "Fig. 3 shows the curve.",
        "The results (see Fig. 2) are clear.",
        "On April 1, 2011, the Pistons retired Rodman's No. 10 jersey.",
        "His debut mixtape, Death Before Dishonor: Vol. 1 (2005) sold well.",
    ],
)
def test_an_abbreviation_does_not_end_a_sentence(text: str) -> None:
    assert sentences(f"{text} The next one follows.") == [text, "The next one follows."]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1. Introduction\n\nThe paper starts here.", ["1. Introduction", "The paper starts here."]),
        ("2.1.6. Masks\n\nA mask hides data.", ["2.1.6. Masks", "A mask hides data."]),
        ("Chapter 2. The next part.", ["Chapter 2.", "The next part."]),
        ("They met on Jan. 5. They talked.", ["They met on Jan. 5.", "They talked."]),
    ],
)
def test_a_number_starts_what_it_numbers(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("The steps are:\n1. Open the file\n2. Read it\n3. Close it", ("Open", "Read", "Close")),
        ("The steps are: 1. Open the file. 2. Read it. 3. Close it.", ("Open", "Read", "Close")),
        ("The colours are:\n- red\n- green\n- blue", ("red", "green", "blue")),
        ("The colours are:\n\n• red\n\n• green\n\n• blue", ("red", "green", "blue")),
    ],
)
def test_a_list_is_one_sentence_with_the_line_that_leads_into_it(text: str, items: tuple[str, ...]) -> None:
    whole, after = sentences(text + "\n\nAfter the list.")
    assert whole.startswith("The ") and all(item in whole for item in items) and after == "After the list."


def test_a_long_list_is_a_sentence_an_item() -> None:
    items = [f"- item number {n} " + "word " * 20 for n in range(12)]
    found = sentences("The items are:\n" + "\n".join(items))
    assert len("\n".join(items)) > LIST_CHARS
    assert len(found) == 13 and found[1].startswith("- item number 0")


def test_a_table_is_a_sentence_a_row_and_its_separator_none() -> None:
    text = "| Food | Calories per portion |\n|---|---|\n| Berries | 150 |\n| Bread | 250 |"
    assert sentences(text) == ["| Food | Calories per portion |", "| Berries | 150 |", "| Bread | 250 |"]


def test_a_bar_in_a_line_of_prose_does_not_make_it_a_row() -> None:
    text = "Paultons Park | Home of Peppa Pig World is near Romsey. It has 70 rides."
    assert sentences(text) == ["Paultons Park | Home of Peppa Pig World is near Romsey.", "It has 70 rides."]


@pytest.mark.parametrize(
    "text",
    [
        "The steps are:\n1. Open the file\n2. Read it\n3. Close it\n\nDone. Really.",
        "| Food | kcal |\n|---|---|\n| Berries | 150 |\n\nA  note   here (e.g. this).",
        "Plain  text,\nwrapped over\nlines. And more.",
    ],
)
def test_spans_give_the_sentences_and_index_the_text_as_older_indexes_did(text: str) -> None:
    spans = sentence_spans(text)
    assert sentences(text, spans) == sentences(text)
    # Offsets into the text with its whitespace normalized, a list's or a table's line breaks
    # standing where spaces stood: an index ingested before lists were kept reads the same places.
    flat = "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))
    lines_as_spaces = [re.sub(r"(?<!\n)\n(?!\n)", " ", s) for s in sentences(text)]
    assert [flat[a:b] for a, b in zip(spans[::2], spans[1::2])] == lines_as_spaces
