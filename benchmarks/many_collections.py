"""Collections: a question against one of ten collections costs what it costs against one index.

    .venv/bin/python benchmarks/many_collections.py [--chunks 1000] [--collections 10] [--rounds 5]
                                                    [--questions 20] [--warmup 5] [--smoke]

(Not `collections.py`: a script's folder comes first on `sys.path`, so that name would hide the
standard library's `collections` from every benchmark here.)

Two `crag serve` processes, as a user runs them (`crag --config FILE serve`), each with a ring
key scoped to the collection asked (`crag keys create`), offline (no model: crag's own grader and
extractive answers, so that the server's own work is all there is to measure):

* ten: an index folder of `--collections` collections ("c00" ... "c09"), `--chunks` chunks each,
  asked through `POST /workflows/crag:c09/run` (the last by name: anything that walks the
  collections in order walks them all first);
* one: an index folder holding c09's documents alone, the default collection, asked through
  `POST /workflows/crag/run`.

Both index the same documents for the question (c09's), so that the difference is the nine
other collections served beside it. Corpora are scale.py's (`make_corpus`: four shuffled
sentences of the shared dev corpora a document, one chunk each), cut into the collections in
order; a question is the first sentence of one of c09's documents, as cold_start.py asks.

Each round starts both servers afresh (the one first in even rounds, the ten first in odd), and:
- cold: the first question after the server answers `/health`, the same question every round
  (its wall time, and the server's CPU seconds for it);
- warm: `--warmup` untimed questions each, then `--questions` questions asked of both in turn
  (which goes first alternates), each timed on the client (wall) and on the server (its CPU
  seconds from /proc, read before and after: 10 ms ticks, so their mean is reported).
The figures are medians over every round: ten / one for cold and warm wall time (goal <= 1.1
each) and warm server CPU. Also each server's build (`build_server`, timed in the child), its
time from spawn to a healthy `/health`, and its RSS once up and after the warm questions, which
an operator sharing one server between teams will want to know. At smoke size: three chunks a
collection, one round, two questions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import _harness

if TYPE_CHECKING:
    import httpx

HERE = Path(__file__).resolve().parent
GOAL = 1.1  # ten / one, cold and warm

# `crag --config FILE serve`, with `build_server` timed: its seconds are the first line printed.
_SERVE = """
import json, sys, time
import crag.app.server as server
from crag.app.cli import main
build = server.build_server
def timed(*args, **kwargs):
    start = time.perf_counter()
    built = build(*args, **kwargs)
    print(json.dumps({"build_s": time.perf_counter() - start}), flush=True)
    return built
server.build_server = timed
sys.exit(main(["--config", sys.argv[1], "serve"]))
"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- the index folders


@dataclass(frozen=True)
class Setup:
    """What both servers serve: their config files, the model names, the tokens and questions."""

    configs: dict[str, Path]  # "one" / "ten": its crag.toml
    models: dict[str, str]  # the workflow name to ask: "crag" / "crag:c09"
    tokens: dict[str, str]
    cold: str
    warm: list[str]
    chunks: dict[str, int]


def names(count: int) -> list[str]:
    return [f"c{i:02d}" for i in range(count)]


def build(work: Path, chunks: int, count: int, questions: int) -> Setup:
    """The corpus cut into `count` collections of `chunks` documents, ingested under ten/ and
    the last one alone under one/; a ring key for the asked collection in each."""
    sys.path.insert(0, str(HERE))
    from scale import make_corpus

    from crag import ingest
    from crag.app.keys import create_key, keys_file
    from crag.config import Settings
    from crag.index.collections import collection_path
    from crag.text import sentences

    corpus = work / "corpus.jsonl"
    make_corpus(_harness.DATA, chunks * count, corpus)
    lines = corpus.read_text(encoding="utf-8").splitlines()
    collections = names(count)
    started = time.perf_counter()
    for i, name in enumerate(collections):
        part = work / "docs" / f"{name}.jsonl"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_text("".join(f"{line}\n" for line in lines[i * chunks:(i + 1) * chunks]), encoding="utf-8")
        ingest([part], collection_path(work / "ten", name))
    asked = collections[-1]
    ingest([work / "docs" / f"{asked}.jsonl"], work / "one")
    say(f"ingested {count} collections of {chunks} chunks, and the one, in {time.perf_counter() - started:.0f} s")

    asked_docs = [json.loads(line)["text"] for line in lines[(count - 1) * chunks:]]
    asked_questions = [sentences(text)[0].rstrip(".!?") + "?" for text in asked_docs]
    configs, tokens = {}, {}
    for which, root, collection in (("one", work / "one", "default"), ("ten", work / "ten", asked)):
        config = work / f"{which}.toml"
        config.write_text(f'[index]\npath = "{root}"\n\n[web_search]\nkind = "local"\n'
                          f'corpus = "{work / "docs" / f"{asked}.jsonl"}"\n', encoding="utf-8")
        settings = Settings.load(config_file=config, env={})
        for name in ([collection] if which == "one" else collections):  # a key per collection, as a team would
            _, token = create_key(keys_file(settings), f"{name}-team", [name])
            if name == collection:
                tokens[which] = token
        configs[which] = config
    return Setup(configs, {"one": "crag", "ten": f"crag:{asked}"}, tokens, asked_questions[0],
                 asked_questions[1:1 + questions], {"one": chunks, "ten": chunks * count})


# ---------------------------------------------------------------------------- the servers


@dataclass
class Server:
    which: str
    pid: int
    url: str
    model: str
    token: str
    build_s: float = 0.0
    ready_s: float = 0.0
    rss_up_mb: float = 0.0
    cold: list[float] = field(default_factory=list)


def rss_mb(pid: int) -> float:
    """The process's resident set now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(which: str, setup: Setup, work: Path, round_: int) -> Iterator[Server]:
    """`crag serve` on `which`'s config, a fresh run store, a free port; up and healthy."""
    import httpx

    port = free_port()
    config = work / f"{which}-{round_}.toml"
    config.write_text(setup.configs[which].read_text(encoding="utf-8")
                      + f'\n[server]\nhost = "127.0.0.1"\nport = {port}\nstore = "{work / f"{which}-{round_}.db"}"\n',
                      encoding="utf-8")
    log = work / f"{which}-{round_}.log"
    started = time.perf_counter()
    with log.open("w") as err:
        child = subprocess.Popen([sys.executable, "-c", _SERVE, str(config)], stdout=subprocess.PIPE,
                                 stderr=err, text=True, env=_harness.offline_env())
    try:
        timing = child.stdout.readline()
        if not timing:
            raise RuntimeError(f"the {which} server exited ({child.wait()}): {log.read_text()[-3000:]}")
        server = Server(which, child.pid, f"http://127.0.0.1:{port}", setup.models[which], setup.tokens[which],
                        build_s=json.loads(timing)["build_s"])
        for _ in range(1200):  # a guard against a hang, never a measure: 120 s
            try:
                if httpx.get(server.url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if child.poll() is not None:
                raise RuntimeError(f"the {which} server exited ({child.returncode}): {log.read_text()[-3000:]}")
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the {which} server did not answer /health within 120 s")
        server.ready_s = time.perf_counter() - started
        server.rss_up_mb = rss_mb(child.pid)
        yield server
    finally:
        child.terminate()
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(client: httpx.Client, server: Server, question: str) -> tuple[float, float]:
    """One question, waited for: its wall seconds on the client and the server's CPU seconds."""
    cpu = cpu_seconds(server.pid)
    started = time.perf_counter()
    reply = client.post(f"{server.url}/workflows/{server.model}/run",
                        json={"start_event": {"query": question}},
                        headers={"Authorization": f"Bearer {server.token}"})
    wall = time.perf_counter() - started
    if reply.status_code != 200:
        raise RuntimeError(f"the {server.which} server answered {reply.status_code}: {reply.text[:500]}")
    return wall, cpu_seconds(server.pid) - cpu


# ---------------------------------------------------------------------------- the measure


@dataclass
class Figures:
    cold: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    cold_cpu: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    warm: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    build: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    ready: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    rss_up: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    rss_warm: dict[str, list[float]] = field(default_factory=lambda: {"one": [], "ten": []})
    paired: list[float] = field(default_factory=list)  # each warm question's ten / one


def one_round(setup: Setup, work: Path, round_: int, warmup: int, figures: Figures) -> None:
    import httpx

    order = ["one", "ten"] if round_ % 2 == 0 else ["ten", "one"]
    with ExitStack() as stack, httpx.Client(timeout=120) as client:
        servers = {}
        for which in order:  # started one at a time, its cold question asked before the next starts
            server = servers[which] = stack.enter_context(serving(which, setup, work, round_))
            wall, cpu = ask(client, server, setup.cold)
            figures.cold[which].append(wall)
            figures.cold_cpu[which].append(cpu)
            figures.build[which].append(server.build_s)
            figures.ready[which].append(server.ready_s)
            figures.rss_up[which].append(server.rss_up_mb)
        for question in setup.warm[:warmup]:
            for which in order:
                ask(client, servers[which], question)
        for i, question in enumerate(setup.warm[warmup:]):
            pair = {}
            for which in (order if i % 2 == 0 else order[::-1]):
                wall, cpu = ask(client, servers[which], question)
                pair[which] = wall
                figures.warm[which].append(wall)
                figures.cpu[which].append(cpu)
            figures.paired.append(pair["ten"] / pair["one"])
        for which in order:
            figures.rss_warm[which].append(rss_mb(servers[which].pid))
    say(f"round {round_ + 1}: cold one {figures.cold['one'][-1] * 1000:.0f} ms, ten "
        f"{figures.cold['ten'][-1] * 1000:.0f} ms; build one {figures.build['one'][-1]:.2f} s, "
        f"ten {figures.build['ten'][-1]:.2f} s")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(figures: Figures, setup: Setup, args: argparse.Namespace, run: _harness.Run) -> None:
    rows = [
        ("cold question, ms (median of rounds)", "cold", 1000),
        ("cold question, server CPU ms (median of rounds)", "cold_cpu", 1000),
        ("warm question, ms (median)", "warm", 1000),
        ("warm question, server CPU ms (mean: /proc counts 10 ms ticks)", "cpu", 1000),
        ("build_server, s", "build", 1),
        ("spawn to healthy /health, s", "ready", 1),
        ("RSS once up, MB", "rss_up", 1),
        ("RSS after the warm questions, MB", "rss_warm", 1),
    ]
    print(f"\n{args.collections} collections of {args.chunks} chunks (asked: {setup.models['ten']}) vs one index "
          f"of the same {args.chunks} chunks; {args.rounds} round(s) of {args.questions} timed warm questions "
          f"(after {args.warmup} untimed), offline\n")
    print("| figure | one index | ten collections | ten / one |\n|---|---|---|---|")
    for label, key, scale in rows:
        average = statistics.fmean if key == "cpu" else median
        one, ten = (average(getattr(figures, key)[which]) for which in ("one", "ten"))
        print(f"| {label} | {one * scale:,.2f} | {ten * scale:,.2f} | {ten / one:.3f} |")
        run.figures[f"{key}_one"] = one * scale
        run.figures[f"{key}_ten"] = ten * scale
        run.figures[f"{key}_ratio"] = ten / one
    paired = median(figures.paired)
    print(f"\nwarm, median of each question's ten / one: {paired:.3f}")
    run.figures["warm_paired_ratio"] = paired
    run.figures["chunks"] = setup.chunks
    run.goal("cold question, ten / one", run.figures["cold_ratio"], at_most=GOAL)
    run.goal("warm question, ten / one", run.figures["warm_ratio"], at_most=GOAL)


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--chunks", type=int, default=1000, help="chunks (documents) per collection")
    cli.add_argument("--collections", type=int, default=10, help="collections the many-collection server serves")
    cli.add_argument("--rounds", type=int, default=5, help="fresh pairs of servers, each with a cold question")
    cli.add_argument("--questions", type=int, default=20, help="timed warm questions per round, asked of both")
    cli.add_argument("--warmup", type=int, default=5, help="untimed warm-up questions per round")
    args = _harness.parse(cli, smoke={"chunks": 3, "rounds": 1, "questions": 2, "warmup": 0})
    if args.questions + args.warmup + 1 > args.chunks:
        cli.error("--chunks must exceed --questions + --warmup: each question is a document's first sentence")
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-collections-") as tmp:
        work = Path(tmp)
        setup = build(work, args.chunks, args.collections, args.warmup + args.questions)
        figures = Figures()
        for round_ in range(args.rounds):
            one_round(setup, work, round_, args.warmup, figures)
        report(figures, setup, args, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
