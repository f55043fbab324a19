"""`--collection NAME` at the command line's doors: `crag ingest` writes a collection of its own,
`crag ask`, `crag cache` and `crag mcp` read one, and none of them sees another's documents."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

import crag
from crag.app.cli import main

# Each collection's one document, and a secret that must never reach the other's answers.
DOCUMENTS = {
    "hr": ("vacation.txt", "Vacation policy. Every employee gets 30 vacation days a year. HR code ORCHID-41."),
    "legal": ("contracts.txt", "Contract policy. Supplier contracts renew every March. Legal code GRANITE-77."),
}
SECRETS = {"hr": "ORCHID-41", "legal": "GRANITE-77"}
QUESTIONS = ("How many vacation days does an employee get?", "When do supplier contracts renew?")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index folder holding the collections hr and legal (and no default index)."""
    base = tmp_path_factory.mktemp("collections")
    for name, (file, text) in DOCUMENTS.items():
        (base / name).mkdir()
        (base / name / file).write_text(text, encoding="utf-8")
        assert main(["ingest", str(base / name), "--index", str(base / "index"), "--collection", name, "-q"]) == 0
    return base / "index"


def ask(capsys: pytest.CaptureFixture[str], root: Path, collection: str, question: str) -> str:
    assert main(["ask", question, "--index", str(root), "--collection", collection, "--json", "-q"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("collection", ["hr", "legal"])
def test_each_collection_answers_from_its_own_documents_only(
    capsys: pytest.CaptureFixture[str], root: Path, collection: str
) -> None:
    other = next(name for name in DOCUMENTS if name != collection)
    for question in QUESTIONS:
        out = ask(capsys, root, collection, question)
        result = json.loads(out.strip().splitlines()[-1])
        assert {s["file"] for s in result["sources"] if s["kind"] == "internal"} <= {DOCUMENTS[collection][0]}
        assert SECRETS[other] not in out and DOCUMENTS[other][0] not in out
    assert SECRETS[collection] in ask(capsys, root, collection, QUESTIONS[0] if collection == "hr" else QUESTIONS[1])


def test_an_ingest_into_a_collection_writes_its_own_index_and_leaves_the_default_alone(
    capsys: pytest.CaptureFixture[str], root: Path
) -> None:
    assert sorted(p.name for p in (root / "collections").iterdir()) == ["hr", "legal"]
    assert all((root / "collections" / name / "CURRENT").is_file() for name in DOCUMENTS)
    assert not (root / "CURRENT").exists()  # no default collection was made
    assert main(["ingest", str(root.parent / "hr"), "--index", str(root), "--collection", "hr"]) == 0
    assert f"1 unchanged, 0 chunk(s) added; 1 chunk(s) in {root / 'collections' / 'hr'}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["ask", "anything", "--collection", "HR"], "'HR' cannot name a collection"),
    (["ingest", "{docs}", "--collection", "../hr"], "'../hr' cannot name a collection"),
    (["ask", "anything", "--collection", "eng"], "No collection 'eng' in {root}"),
    (["cache", "stats", "--collection", "eng"], "crag ingest YOUR_DOCS --collection eng"),
    (["ask", "anything"], "No crag index at {root}"),  # the default: its own error, as always
    (["cache", "clear", "--collection", "hr", "--store", "postgresql://db/crag"], "shared by every collection"),
])
def test_a_bad_or_missing_collection_is_one_clear_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], root: Path, argv: list[str], message: str
) -> None:
    values = {"root": str(root), "docs": str(root.parent / "hr")}
    assert main([*(a.format(**values) for a in argv), "--index", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and message.format(**values) in err and "Traceback" not in err


def test_cache_reads_the_collections_own_grade_cache(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    assert main(["cache", "stats", "--index", str(root), "--collection", "legal"]) == 0
    assert capsys.readouterr().out.startswith(f"{root / 'collections' / 'legal' / 'grades.sqlite'}: ")


async def test_crag_mcp_searches_the_collection_it_was_given(root: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRAG_", "OPENAI_", "TAVILY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(crag.__file__).parents[1]), *filter(None, [env.get("PYTHONPATH")])])
    args = ["-m", "crag.app.cli", "mcp", "--index", str(root), "--collection", "legal"]
    async with Client(StdioServerParameters(command=sys.executable, args=args, env=env, cwd=tmp_path)) as client:
        for question, named in zip(QUESTIONS, ({}, {"collection": "legal"})):
            found = await client.call_tool("search", {"question": question, "top_k": 5, **named})
            assert not found.is_error and found.structured_content["collection"] == "legal"
            assert [hit["source"] for hit in found.structured_content["chunks"]] == ["contracts.txt"]
            assert SECRETS["hr"] not in json.dumps(found.structured_content)
        refused = await client.call_tool("search", {"question": QUESTIONS[0], "collection": "hr"})
        assert refused.is_error and SECRETS["hr"] not in refused.content[0].text  # not served here
