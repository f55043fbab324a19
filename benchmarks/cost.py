"""Cost: model calls, tokens and verdict agreement of model-only, batch, cascade and cascade + cache
grading, on the dev sets in ../shared/data.

    .venv/bin/python benchmarks/cost.py [--sets squad,popqa,hotpotqa] [--limit 100] [--noise 1.5]
                                        [--data ../shared/data] [--smoke]

THE MODEL HERE IS A SIMULATION. A loopback OpenAI-compatible server (tests/support/loopback.py)
rates a chunk from the gold label: 9 when it is part of the question's gold passage, 1 otherwise,
plus Gaussian noise (sd `--noise` on the 0-10 scale), fixed per (question, chunk) so that asking again
gets the same rating, as a model at temperature 0 mostly does. It reports usage by word counts.
So this measures calls, tokens and agreement between grading modes; it says nothing of a real
model's quality.

Per set: an index of the corpus without the gold passages of half the questions (seed 7); the
first half of the questions fits the cascade's band (`crag.evaluation.cascade.fit_band`,
target agreement `--target`), the second half is asked, one question at a time, through
`build_workflow` in each mode, with the decomposer on its offline rules (so a question costs
k grades, a rewrite and an answer, k + 2 calls at most):

* model-only: `[grader] kind = "llm"`, one call per chunk;
* batch: `batch = true`, one call for all k chunks;
* cascade: `kind = "cascade"` with the fitted band, no cache;
* cascade + batch: the uncertain chunks graded in one call (a band fitted for that);
* cascade + batch + cache: the same with the grade cache on, asked twice: cold, then the same
  questions again. (The other modes run with the cache off.)
* rerank: `kind = "rerank"`, a loopback rerank server (TEI's shape) scoring rating / 10, read
  with the model's thresholds: one request for all k chunks;
* cascade + rerank: `kind = "cascade"` with a `[reranker]`: the reranker gets the uncertain
  chunks, in one request, and none when the evaluator is sure of every chunk.

Printed per mode: model calls per question (all, and grading only), verdict agreement with
model-only grading, whether the tokens in the runs' cost records equal what the server
reported (summed over every call, and the calls counted), and wall time per question
(`--latency` seconds per model call, 20 ms by default).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _harness

sys.path.insert(0, str(_harness.TESTS))

from support.loopback import LoopbackServer, Reply, chat_completion, message_text  # noqa: E402

from crag import Settings  # noqa: E402
from crag.evaluation.cascade import fit_band  # noqa: E402
from crag.evaluation.datasets import drop_gold, load_corpus, load_questions, write_corpus  # noqa: E402
from crag.index import ChunkIndex  # noqa: E402
from crag.ingestion import ingest  # noqa: E402
from crag.steps.grading import LexicalEvaluator, LLMGrader, thresholds_of  # noqa: E402
from crag.workflows.factory import build_workflow  # noqa: E402

SETS = {"squad": "squad-dev", "popqa": "popqa-dev", "hotpotqa": "hotpotqa-dev"}
SIMULATION = ("The model is a SIMULATION: ratings come from the gold labels plus noise; this "
              "measures calls, tokens and agreement between grading modes, not a real model's quality.")


def _words(text: str) -> str:
    return " ".join(text.split())


class SimulatedModel:
    """The loopback model: ratings from gold labels with noise; counts every call and its usage."""

    def __init__(self, gold_text: dict[str, str], noise: float, latency: float, seed: int) -> None:
        self.gold_text = gold_text  # question -> its gold passage's text, spacing collapsed
        self.noise, self.latency, self.seed = noise, latency, seed
        self.calls: dict[str, int] = {"grade": 0, "batch": 0, "rerank": 0, "other": 0}
        self.tokens_in = self.tokens_out = 0
        self.reranked: list[str] = []  # each rerank request's query: a question, or a hop's

    def rating(self, question: str, document: str) -> int:
        gold = self.gold_text.get(_words(question), "")
        relevant = bool(gold) and _words(document)[:120] in gold
        digest = hashlib.sha256(f"{self.seed}|{question}|{_words(document)[:200]}".encode()).digest()
        noise = random.Random(digest).gauss(0.0, self.noise)
        return int(min(10, max(0, round((9 if relevant else 1) + noise))))

    def reply(self, prompt: str) -> str:
        question = prompt.split("Question: ", 1)[1].split("\n", 1)[0] if "Question: " in prompt else ""
        if "Rate how relevant the document is" in prompt:
            self.calls["grade"] += 1
            document = prompt.split("Document:\n", 1)[1].split("\n\nRate how relevant", 1)[0]
            return str(self.rating(question, document))
        if "Rate each of the" in prompt:
            self.calls["batch"] += 1
            block = prompt.split("Documents:\n", 1)[1].split("\n\nRate each of the", 1)[0]
            documents = re.split(r"(?:^|\n\n)\[\d+\] ", block)[1:]
            return json.dumps([self.rating(question, d) for d in documents])
        self.calls["other"] += 1
        if prompt.startswith("Rewrite the question"):
            return question
        return "From the passages [1]."

    def rerank(self, body: dict) -> Reply:
        """A rerank server in TEI's shape: `texts` in, [{index, score}] out, score = rating / 10."""
        self.calls["rerank"] += 1
        self.reranked.append(body["query"])
        scores = [self.rating(body["query"], text) / 10 for text in body["texts"]]
        return Reply(200, sorted(({"index": i, "score": s} for i, s in enumerate(scores)), key=lambda r: -r["score"]))

    def handle(self, request) -> Reply:  # noqa: ANN001 - a loopback Request
        if request.path == "/rerank":
            time.sleep(self.latency)
            return self.rerank(request.json)
        prompt = message_text(request)
        time.sleep(self.latency)
        body = chat_completion(self.reply(prompt), model="simulated", prompt_text=prompt)
        self.tokens_in += body["usage"]["prompt_tokens"]
        self.tokens_out += body["usage"]["completion_tokens"]
        return Reply(200, body)

    def reset(self) -> None:
        self.calls = dict.fromkeys(self.calls, 0)
        self.reranked = []
        self.tokens_in = self.tokens_out = 0


@dataclass
class ModeResult:
    name: str
    questions: int = 0
    seconds: float = 0.0
    calls: int = 0
    grading_calls: int = 0
    verdicts: list[str] = field(default_factory=list)
    tokens_match: bool = True
    calls_match: bool = True


def _settings(server: LoopbackServer, index_dir: Path, web: Path, **grader: object) -> Settings:
    cache = grader.pop("cache", False)
    reranker = grader.pop("reranker", {})
    return Settings.load(
        env={"OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-simulated", "OPENAI_MODEL": "simulated"},
        index={"path": index_dir}, web_search={"corpus": web}, decomposer={"kind": "rules"},
        grader=grader, cache={"enabled": cache}, reranker=reranker,
    )


async def _ask_all(name: str, settings: Settings, questions: list, model: SimulatedModel) -> ModeResult:
    workflow = build_workflow(settings, index=ChunkIndex.load(settings.index.path))
    model.reset()
    out = ModeResult(name)
    tokens_in = tokens_out = calls = 0
    started = time.perf_counter()
    for q in questions:
        result = await workflow.run(query=q.question)
        out.verdicts.append(result.verdict.value)
        tokens_in += result.cost.tokens_in
        tokens_out += result.cost.tokens_out
        calls += result.cost.calls
    out.seconds = time.perf_counter() - started
    out.questions = len(questions)
    out.calls = sum(model.calls.values())
    out.grading_calls = model.calls["grade"] + model.calls["batch"] + model.calls["rerank"]
    out.tokens_match = (tokens_in, tokens_out) == (model.tokens_in, model.tokens_out)
    out.calls_match = calls == out.calls
    if model.calls["rerank"]:  # a run grades its question's chunks in one request; a hop's are graded apart
        asked = {q.question for q in questions}
        own = sum(query in asked for query in model.reranked)
        print(f"{name}: {own} rerank requests for {len(questions)} questions' own chunks, "
              f"{len(model.reranked) - own} for their hops' chunks", file=sys.stderr)
    return out


async def run_set(name: str, args: argparse.Namespace, tmp: Path) -> list[ModeResult]:
    questions = load_questions(args.data / f"{SETS[name]}.jsonl")[: args.limit]
    passages = load_corpus(args.data / f"{SETS[name]}-corpus.jsonl")
    text = {p.doc_id: _words(p.text) for p in passages}
    drop = drop_gold(questions, 0.5, args.seed)
    folder = tmp / name
    folder.mkdir()
    write_corpus(passages, folder / "corpus.jsonl", exclude=drop.doc_ids)
    write_corpus(passages, folder / "web.jsonl")
    ingest([folder / "corpus.jsonl"], folder / "index")
    fit_half, test_half = questions[: len(questions) // 2], questions[len(questions) // 2 :]
    model = SimulatedModel({_words(q.question): text[q.doc_id] for q in questions}, args.noise, args.latency, args.seed)
    with LoopbackServer(model.handle) as server:
        index = ChunkIndex.load(folder / "index")
        settings = _settings(server, folder / "index", folder / "web.jsonl", kind="llm")
        retriever = build_workflow(settings, index=index).retriever
        evaluator = LexicalEvaluator(index.term_stats)
        from crag.models import openai_llm

        grader = LLMGrader(openai_llm(settings.llm), fallback=evaluator)
        offline, graded = [], []
        for q in fit_half:
            chunks = await retriever.retrieve(q.question)
            offline.append([g.score for g in await evaluator.grade(q.question, chunks)])
            graded.append([g.score for g in await grader.grade(q.question, chunks)])
        upper, lower = thresholds_of(grader, settings.grader.upper, settings.grader.lower)  # the model's
        limits = dict(upper=upper, lower=lower, target=args.target)
        band = fit_band(offline, graded, **limits)
        batch_band = fit_band(offline, graded, batch=True, **limits)
        for kind, fit in (("per chunk", band), ("batch", batch_band)):
            print(f"{name}: band ({kind}) fitted on {len(fit_half)} questions: [{fit.low}, {fit.high}), "
                  f"agreement {fit.agreement:.3f}, {fit.calls_per_question:.2f} grading calls/question",
                  file=sys.stderr)
        index_dir, web = folder / "index", folder / "web.jsonl"
        cascade = dict(kind="cascade", band_low=band.low, band_high=band.high)
        cascade_batch = dict(kind="cascade", band_low=batch_band.low, band_high=batch_band.high, batch=True)
        # The simulated reranker scores rating / 10: read with the model's thresholds, as fitted ones would be.
        reranker = {"reranker": {"base_url": server.url, "shape": "tei", "upper": upper, "lower": lower}}
        results = [
            await _ask_all("model-only", _settings(server, index_dir, web, kind="llm"), test_half, model),
            await _ask_all("batch", _settings(server, index_dir, web, kind="llm", batch=True), test_half, model),
            await _ask_all("cascade", _settings(server, index_dir, web, **cascade), test_half, model),
            await _ask_all("cascade+batch", _settings(server, index_dir, web, **cascade_batch), test_half, model),
            await _ask_all("cascade+batch+cache, cold",
                           _settings(server, index_dir, web, cache=True, **cascade_batch), test_half, model),
            await _ask_all("cascade+batch+cache, again",
                           _settings(server, index_dir, web, cache=True, **cascade_batch), test_half, model),
            await _ask_all("rerank", _settings(server, index_dir, web, kind="rerank", **reranker), test_half, model),
            # The band fitted for the per-chunk model: the reranker gives the same scores.
            await _ask_all("cascade+rerank", _settings(server, index_dir, web, **cascade, **reranker), test_half, model),
        ]
    return results


def report(name: str, results: list[ModeResult]) -> list[str]:
    reference = results[0].verdicts
    rows = []
    for r in results:
        agree = sum(a == b for a, b in zip(r.verdicts, reference)) / max(len(reference), 1)
        rows.append(
            f"| {name} | {r.name} | {r.calls / r.questions:.2f} | {r.grading_calls / r.questions:.2f} | "
            f"{100 * agree:.1f}% | {'yes' if r.tokens_match and r.calls_match else 'NO'} | "
            f"{1000 * r.seconds / r.questions:.0f} |"
        )
    return rows


def main() -> None:
    cli = _harness.parser(__doc__)
    cli.add_argument("--sets", default="squad,popqa,hotpotqa")
    cli.add_argument("--limit", type=int, default=100, help="questions per set (half fit, half asked)")
    cli.add_argument("--noise", type=float, default=1.5, help="sd of the simulated rating's noise, 0-10 scale")
    cli.add_argument("--latency", type=float, default=0.02, help="seconds per simulated model call")
    cli.add_argument("--target", type=float, default=0.98,
                     help="verdict agreement the band is fitted for, on the first half (a margin over "
                     "the 95%% wanted on the second half, which the fit never sees)")
    cli.add_argument("--seed", type=int, default=7)
    cli.add_argument("--data", type=Path, default=_harness.DATA)
    args = _harness.parse(cli, smoke={"sets": "squad", "limit": 4})
    print(SIMULATION)
    lines = ["| set | mode | model calls/q | grading calls/q | verdicts as model-only | tokens = server's | ms/q |",
             "|---|---|---|---|---|---|---|"]
    with _harness.measured(__file__, args) as run, tempfile.TemporaryDirectory(prefix="crag-cost-") as tmp:
        for name in args.sets.split(","):
            results = asyncio.run(run_set(name, args, Path(tmp)))
            lines += report(name, results)
            run.figures[name] = {r.name: {"calls_per_question": r.calls / r.questions,
                                          "grading_calls_per_question": r.grading_calls / r.questions,
                                          "tokens_and_calls_match": r.tokens_match and r.calls_match}
                                 for r in results}
        print("\n".join(lines))
        print(f"\n(k = 5, {args.limit // 2} questions asked per set, noise sd {args.noise}, "
              f"{1000 * args.latency:.0f} ms per call; {SIMULATION})")

if __name__ == "__main__":
    main()
