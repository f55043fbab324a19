"""Running headers and footers, and only those, dropped from a PDF's pages (issue 40)."""

from __future__ import annotations

from crag.ingestion.formats.running_lines import drop_running_lines

BODIES = ["Masks hide the values.", "Permissions filter rows.", "QSECOFR holds all rights.",
          "Groups share a profile.", "Audits log each change.", "Views join the tables.",
          "Indexes speed the reads.", "Journals record the writes."]


def test_a_books_alternating_headers_go_and_its_roman_page_numbers_count_as_numbers() -> None:
    pages = [f"{body}\n{n} Access Control Support in DB2" if n % 2 == 0 else
             f"Chapter 3. Row Access {n}\n{body}" for n, body in enumerate(BODIES[:6], 10)]
    front = [f"© Copyright IBM Corp. 2014. All rights reserved. {n}\n{body}"
             for n, body in zip(("iii", "xi", "1"), BODIES[6:] + ["Preface."], strict=True)]
    assert drop_running_lines(pages + front) == [*BODIES, "Preface."]


def test_headings_repeated_lines_and_short_files_stay() -> None:
    chapters = [f"Chapter {n}\n{body}" for n, body in enumerate(BODIES[:3], 1)]  # a heading, not a header
    same = [f"Warning: mains voltage\n{body}" for body in BODIES[:3]] + BODIES[3:]  # 3 of 8, no page number
    for pages in (chapters + BODIES[3:], same, ["1 Short Guide\nA.", "2 Short Guide\nB."]):
        assert drop_running_lines(pages) == pages


def test_a_page_with_nothing_but_the_running_line_keeps_it() -> None:
    pages = [f"{n} Access Control Support\n{body}" for n, body in enumerate(BODIES[:3], 1)]
    assert drop_running_lines([*pages, "4 Access Control Support"]) == [*BODIES[:3], "4 Access Control Support"]
