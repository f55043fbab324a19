"""Tables in a PDF kept as tables (issue 33): a table printed by a browser becomes groups of
rows, each led by the header and cited by its page, and prose in columns stays prose. Skipped
only where no Chromium exists; `.ci/run` installs Debian's `chromium`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.marks import BROWSER

from crag.app.cli import main
from crag.app.render.browser import print_pdf
from crag.ingestion.readers import read_documents

pytestmark = [*BROWSER, pytest.mark.usefixtures("no_config_file")]

STYLE = ("table { border-collapse: collapse; } th, td { border: 1px solid #888; padding: 2px 6px; } "
         ".foot { position: fixed; bottom: 0; width: 100%; display: flex; justify-content: space-between; }")
FOOTER = '<div class="foot"><span>Lumen Energy</span><span>Spring survey</span></div>'
PROSE = ("The pumping stations below were inspected in the spring survey, each by a crew of two, "
         "and the figures were read from the plates fixed beside each pump.")
STAFF = [
    ("Name", "Role", "Duty"),
    ("Zanfo", "Technician", "Handles the cooling loop and the night checks of the north annex, which "
                            "take an hour and more on the coldest nights of the winter season"),
    ("Luken", "Operator", "Reads the meters"),
    ("Garsil", "Engineer", "Signs off the annual service report and the contract for the boilers"),
]
HEADER = ("Station", "Flow (l/s)", "Head (m)", "Commissioned")
STATIONS = [(f"Station{chr(65 + i)}{chr(97 + i)}", f"{10 + i * 3.5:g}", str(5 + i), str(1970 + i))
            for i in range(30)]


def table(rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{cell}</th>" for cell in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows[1:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def printed(folder: Path, name: str, body: str, style: str = STYLE) -> Path:
    page = folder / f"{name}.html"
    page.write_text(f"<!doctype html><html><head><style>{style}</style></head><body>{body}</body></html>",
                    encoding="utf-8")
    return print_pdf(page, folder / "docs" / f"{name}.pdf")


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """survey.pdf: page 1 prose and the staff table (cells that wrap); page 2 the stations; a
    footer of two runs on each page."""
    folder = tmp_path_factory.mktemp("tables")
    (folder / "docs").mkdir()
    body = (f"{FOOTER}<h1>Spring survey</h1><p>{PROSE}</p>{table(STAFF)}"
            f'<h2 style="page-break-before: always">Stations</h2>{table([HEADER, *STATIONS])}')
    return printed(folder, "survey", body)


def test_a_printed_table_becomes_groups_of_rows_each_led_by_its_header(survey: Path) -> None:
    documents = list(read_documents(survey))
    groups = [d for d in documents if d.text.startswith(" | ".join(HEADER) + "\n")]
    assert len(groups) > 1 and all(d.metadata["page"] == "2" for d in groups)
    rows = [row for d in groups for row in d.text.split("\n\n")[1:]]
    assert rows == [" | ".join(station) for station in STATIONS]  # each row once, in order, no footer
    prose = [d for d in documents if PROSE[:40] in d.text]
    assert len(prose) == 1 and "|" not in prose[0].text and STATIONS[0][0] not in prose[0].text


def test_a_cell_that_wraps_stays_in_its_row(survey: Path) -> None:
    staff = next(d for d in read_documents(survey) if d.text.startswith("Name | Role | Duty\n"))
    assert staff.metadata["page"] == "1"
    assert staff.text.split("\n\n")[1:] == [" | ".join(row) for row in STAFF[1:]]


def test_a_question_about_a_row_cites_its_page_and_the_group_holding_it(
    capsys: pytest.CaptureFixture[str], survey: Path, tmp_path: Path
) -> None:
    assert main(["ingest", str(survey), "--index", str(tmp_path / "index"), "--quiet"]) == 0
    capsys.readouterr()
    station = STATIONS[17]
    assert main(["ask", f"What is the head (m) of {station[0]}?", "--index", str(tmp_path / "index"),
                 "--json", "--quiet"]) == 0
    first = json.loads(capsys.readouterr().out)["sources"][0]
    holding = next(d for d in read_documents(survey) if " | ".join(station) in d.text)
    assert (first["file"], first["page"], first["doc_id"]) == ("survey.pdf", "2", holding.doc_id)
    # A row is quoted with its header: each value named by its column.
    assert "; ".join(f"{k}: {v}" for k, v in zip(HEADER, station, strict=True)) in first["text"]


def test_prose_in_two_justified_columns_is_no_table(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    rng = random.Random(5)
    words = "the crew reads each meter at dawn and writes the figure in the log beside the door".split()
    paragraphs = "".join(f"<p>{' '.join(rng.choices(words, k=70))} <b>{rng.choice(words)}</b> "
                         f"{' '.join(rng.choices(words, k=30))}.</p>" for _ in range(12))
    style = "body { column-count: 2; column-gap: 1cm; text-align: justify; font: 11pt/1.4 serif; }"
    pdf = printed(tmp_path, "columns", paragraphs, style)
    documents = list(read_documents(pdf))
    assert len(documents) == len({d.metadata["page"] for d in documents})  # one per page
    assert not any("|" in d.text for d in documents)
