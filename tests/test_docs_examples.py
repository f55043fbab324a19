"""Every shell and Python example in the README and the user guide runs, offline, as written.

A page's ```sh and ```python blocks run in order in a folder of their own, as a reader would
type them: the README and the getting-started page from an empty folder (they export the
sample and ingest it themselves), the other guide pages from one where that is done. A block
is left out only when an HTML comment just before it says why: `<!-- needs: OPENAI_API_KEY -->`
(a key or a server the tests cannot have) or `<!-- skip: reason -->` (it installs crag, or
changes the reader's shell). Blocks of other languages (text, toml) are not run.

To keep this quick, a line that is only a `crag` command (optionally after `NAME=value`
assignments) runs in this process through `crag.app.cli.main`, which is what the `crag`
script calls; any other line, and every line of a block that has one (pipes, `&`, `curl`),
runs in bash with the virtual environment's `crag` first on PATH. Python blocks run in this
interpreter, top-level `await` allowed as in a notebook, one namespace per page.

Blocks that need a local model server (`<!-- needs: OPENAI_BASE_URL ... -->`) also run, against
a loopback server speaking OpenAI's API in place of Ollama, so the documented settings are checked.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import pytest
from support.paths import REPO

from crag.app.cli import main

ROOT = REPO
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
FROM_SCRATCH = {"README.md", "getting-started.md"}  # these export and ingest the sample themselves
RUN = {"sh", "bash", "python"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"<!--\s*(needs|skip):\s*(.+?)\s*-->\s*$")
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")

# What a reader's own folder of notes might hold, for "Your own documents".
MY_NOTES = {
    "launch.md": "# Launch\n\nWe decided to launch the beta on 4 March, after the security review.\n",
    "team.md": "# Team\n\nAda leads the backend; Grace leads the documentation.\n",
}


@contextmanager
def chdir(path: Path) -> Iterator[None]:  # contextlib.chdir is Python 3.11+
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@dataclass
class Block:
    page: str
    line: int
    language: str
    code: str
    marker: tuple[str, str] | None  # ("needs" | "skip", why)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().splitlines()
        marker = MARKER.search(before[-1]) if before else None
        found.append(Block(
            page=page.name,
            line=text.count("\n", 0, match.start()) + 1,
            language=match.group(1),
            code=match.group(2),
            marker=(marker.group(1), marker.group(2)) if marker else None,
        ))
    return found


def commands(code: str) -> list[str]:
    """The block's commands: continuation lines joined, blank and comment-only lines left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def in_process(command: str) -> tuple[dict[str, str], list[str]] | None:
    """(environment, argv) when `command` is only a crag command; None when it needs a shell."""
    words = shlex.split(command, comments=True)
    env = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "crag":
        return None
    if re.search(r"(^|\s)(&&|\|\|?|;|&|>|<)(\s|$)", command.split("#", 1)[0]):
        return None
    return env, words[1:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_shell(block: Block, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = commands(block.code)
    parsed = [in_process(line) for line in lines]
    if all(p is not None for p in parsed):
        for line, (env, argv) in zip(lines, parsed):
            with monkeypatch.context() as mp:
                for name, value in env.items():
                    mp.setenv(name, value)
                out = StringIO()
                with redirect_stdout(out):
                    code = main(argv)
            assert code == 0, f"{block}: `{line}` exited {code}\n{out.getvalue()}"
        return
    script = block.code
    if "crag serve" in script:  # never the reader's port 8000, which may be taken here
        port = free_port()
        script = script.replace("crag serve", f"crag serve --port {port}").replace(":8000", f":{port}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{block} exited {done.returncode}\n{done.stdout}\n{done.stderr}"


def run_python(block: Block, namespace: dict[str, object]) -> None:
    code = compile(block.code, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    out = StringIO()
    with redirect_stdout(out):
        pending = eval(code, namespace)  # noqa: S307 - the documentation's own examples
        if asyncio.iscoroutine(pending):
            asyncio.run(pending)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reader's folder after the walk-through's first steps: the sample exported and ingested."""
    folder = tmp_path_factory.mktemp("prepared")
    with chdir(folder), redirect_stdout(StringIO()):
        assert main(["demo", "--export", "crag-sample"]) == 0
        assert main(["ingest", "-q", "crag-sample/docs"]) == 0
    return folder


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_examples_run(page: Path, prepared: Path, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "reader"
    if page.name in FROM_SCRATCH:
        folder.mkdir()
    else:
        shutil.copytree(prepared, folder)
    notes = folder / "my-notes"
    notes.mkdir()
    for name, text in MY_NOTES.items():
        (notes / name).write_text(text)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    with chdir(folder):
        for block in blocks(page):
            if block.language not in RUN or block.marker is not None:
                continue
            if block.language == "python":
                run_python(block, namespace)
            else:
                run_shell(block, folder, monkeypatch)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_block_left_out_says_why(page: Path) -> None:
    for block in blocks(page):
        if block.marker is not None:
            kind, why = block.marker
            assert block.language in RUN, f"{block}: a marker on a block that would not run anyway"
            assert len(why.split()) >= 1 and len(why) > 5, f"{block}: {kind} what? {why!r}"
        else:
            assert block.language in RUN | {"text", "toml", "json"}, (
                f"{block}: a ```{block.language or '(none)'} block: say sh, python, text or toml"
            )


LOCAL_MODEL_BLOCKS = [b for page in PAGES for b in blocks(page)
                      if b.marker and b.marker[0] == "needs" and "OPENAI_BASE_URL" in b.marker[1]]


@pytest.mark.parametrize("block", LOCAL_MODEL_BLOCKS, ids=str)
def test_the_local_model_settings_reach_an_openai_compatible_server(
    block: Block, prepared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented variables, as written, make crag call the server's /v1 chat route with
    the named model: here a loopback server speaking OpenAI's API stands in for Ollama. (Its
    replies are not what the prompts ask for; a run then degrades to the offline components,
    which is tested elsewhere: this checks the settings reach the server.)"""
    from support.loopback import LoopbackServer, openai_chat

    with LoopbackServer(openai_chat(lambda prompt: "0.9")) as server, chdir(prepared):
        code = block.code.replace("http://localhost:11434", server.url)
        if code == block.code:  # a block that uses the model set up earlier on the page
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
            monkeypatch.setenv("OPENAI_MODEL", "llama3.2")
        for line in commands(code):
            words = shlex.split(line, comments=True)
            if words[0] == "export":
                for word in words[1:]:
                    name, _, value = word.partition("=")
                    monkeypatch.setenv(name, value)
                continue
            env, argv = in_process(line) or pytest.fail(f"{block}: `{line}` is not a crag command")
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            with redirect_stdout(StringIO()):
                assert main([*argv, "-q"]) == 0
        calls = server.requests_to("/chat/completions")
        assert calls and all(r.path == "/v1/chat/completions" for r in calls)
        assert {r.json["model"] for r in calls} == {os.environ["OPENAI_MODEL"]}


def test_the_readme_keeps_its_two_commands_and_is_short() -> None:
    readme = (ROOT / "README.md").read_text()
    first, second = (
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/crag demo",
        'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest',
    )
    code = FENCE.search(readme)
    assert code is not None and code.group(2).splitlines()[:2] == [first, second]
    assert second in (ROOT / ".ci" / "run").read_text()  # CI runs what the README says
    assert len(readme.splitlines()) <= 200


def test_the_readmes_links_to_files_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_demo_export_refuses_a_folder_that_is_not_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.md").write_text("mine")
    assert main(["demo", "--export", str(tmp_path / "taken")]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.md"]


def test_ask_says_when_there_is_no_web_to_search(
    prepared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's first surprise: a question the documents cannot answer, and no web."""
    with chdir(prepared):
        assert main(["ask", "Who invented the lithium-ion battery?"]) == 0
        assert "no web to search: give --web-corpus" in capsys.readouterr().err
        assert main(["ask", "Who invented the lithium-ion battery?",
                     "--web-corpus", "crag-sample/web.jsonl"]) == 0
        assert "no web to search" not in capsys.readouterr().err
