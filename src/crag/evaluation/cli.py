"""The `crag eval` and `crag calibrate` commands, registered on crag's own parser."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crag.cli_flags import add_budget_flags, budget_overrides

_DEFAULT_TARGET = object()  # `--write` alone: --config if given, else ./crag.toml


def add_evaluation_commands(sub: Any) -> None:
    """Add `eval` and `calibrate` to the `crag` command's subcommands (`sub`: what
    `ArgumentParser.add_subparsers()` returns, a type argparse names only privately)."""
    p = sub.add_parser(
        "eval",
        help="measure answer quality against plain RAG on labelled questions",
        description="Run each system on every question of DATASET over an index of CORPUS "
        "(minus the dropped gold passages) and report accuracy, verdicts, evaluator accuracy, "
        "calls and latency, overall and split by gold present / dropped.",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        required=True,
        help="questions, JSON Lines: id, question, answers, doc_id",
    )
    p.add_argument(
        "--corpus", type=Path, required=True, help="passages, JSON Lines: doc_id, title, text"
    )
    p.add_argument(
        "--web-corpus",
        type=Path,
        action="append",
        help="searched as the web (default: the whole --corpus); repeat to search the union "
        "of several (each doc_id once, the first file's copy kept)",
    )
    p.add_argument(
        "--drop-gold",
        type=float,
        default=0.0,
        metavar="P",
        help="remove the gold passage of a random share P of the questions from the index",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random gold drop (default 0)")
    p.add_argument(
        "--systems",
        default="rag,crag",
        help="comma-separated: rag, crag, or module:function builders (default rag,crag)",
    )
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument(
        "--concurrency", type=int,
        help="questions in flight (default 1 offline or with a model on this machine, 8 with a remote model)"
    )
    p.add_argument(
        "--out", type=Path, help="write eval.json, eval.md, outcomes.jsonl and PNG charts here"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_budget_flags(p)
    p.set_defaults(func=_eval)

    p = sub.add_parser(
        "calibrate",
        help="fit the grader's upper/lower thresholds on labelled questions",
        description="Grade the retrieved chunks of every question (with the gold passages of a "
        "random share removed), fit the thresholds against the labels and print them. With "
        "--write they go to [grader] in crag.toml (keeping everything else in the file), which "
        "every later crag command run in that folder reads; in a terminal it asks first.",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        action="append",
        required=True,
        help="questions (JSON Lines); repeat with --corpus to pool several sets",
    )
    p.add_argument(
        "--corpus",
        type=Path,
        action="append",
        required=True,
        help="the passages of the --dataset in the same position",
    )
    p.add_argument(
        "--label",
        choices=["gold", "answer"],
        default="gold",
        help="relevant means: from the gold passage (default), or containing an answer",
    )
    p.add_argument(
        "--target-precision",
        type=float,
        help="fit upper to this precision for relevant chunks instead of the best accuracy",
    )
    p.add_argument(
        "--lower-recall",
        type=float,
        default=0.98,
        help="share of relevant chunks kept at or above lower (default 0.98)",
    )
    p.add_argument(
        "--drop-gold",
        type=float,
        default=0.5,
        metavar="P",
        help="share of questions whose gold passage leaves the index (default 0.5)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--write",
        type=Path,
        nargs="?",
        const=_DEFAULT_TARGET,
        metavar="TOML",
        help="save the thresholds to this settings file (default: --config, else ./crag.toml)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="fit and report, write nothing and do not ask"
    )
    p.add_argument(
        "--band",
        action="store_true",
        help="instead, fit [grader] band_low/band_high of the cascade grader against the configured "
        "model's grades (kind = \"cascade\"; the model grades every retrieved chunk once)",
    )
    p.add_argument(
        "--target-agreement",
        type=float,
        default=0.95,
        metavar="A",
        help="with --band: share of verdicts that must match model-only grading (default 0.95)",
    )
    p.add_argument(
        "--reranker",
        action="store_true",
        help="instead, fit [reranker] upper/lower: the configured reranker scores each question's chunks "
        "(one request per question), beside the offline evaluator; implied by [grader] kind = \"rerank\"",
    )
    p.add_argument(
        "--folds", type=int, default=5, metavar="K",
        help="with --reranker: cross-validate over K folds of whole questions (default 5)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_calibrate)


def _eval(args: argparse.Namespace) -> int:
    from crag.config import Settings
    from crag.evaluation.report import charts_available, markdown, write_outputs
    from crag.evaluation.runner import EvalOptions, evaluate
    from crag.evaluation.summary import summarize

    if args.out is not None and not charts_available():
        print(
            "crag: note: matplotlib is not installed, so --out gets no charts "
            "(pip install 'crag-workflows[eval]')",
            file=sys.stderr,
        )
    options = EvalOptions(
        dataset=args.dataset,
        corpus=args.corpus,
        web_corpus=args.web_corpus,
        drop_gold=args.drop_gold,
        seed=args.seed,
        systems=args.systems,
        limit=args.limit,
        concurrency=args.concurrency,
    )
    run = evaluate(options, Settings.load(args.config, budget=budget_overrides(args)))
    report = summarize(run)
    if args.out is not None:
        written = write_outputs(report, run.outcomes, args.out)
        print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    print(report.model_dump_json() if args.json else markdown(report))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from crag.config import Settings
    from crag.errors import ConfigError
    from crag.evaluation.calibrate import calibrate
    from crag.evaluation.settings_file import set_table_values

    if len(args.dataset) != len(args.corpus):
        raise ConfigError(
            f"{len(args.dataset)} --dataset but {len(args.corpus)} --corpus; give one corpus per dataset."
        )
    if args.band:
        return _calibrate_band(args)
    settings = Settings.load(args.config)
    if args.reranker or settings.grader.kind == "rerank":
        return _calibrate_reranker(args, settings)
    result = calibrate(
        list(zip(args.dataset, args.corpus)),
        settings,
        label=args.label,
        target_precision=args.target_precision,
        lower_recall=args.lower_recall,
        drop_fraction=args.drop_gold,
        seed=args.seed,
    )
    target = _written_to(args)
    if args.json:
        write = args.write is not None and not args.dry_run
        if write:
            set_table_values(target, "grader", {"upper": result.upper, "lower": result.lower})
        print(json.dumps({**result.model_dump(mode="json"), "written": str(target) if write else None}))
        return 0
    at = result.at_upper
    agree = result.verdicts
    print(
        f"upper = {result.upper}   (objective: {result.objective}; label: {result.label})\n"
        f"lower = {result.lower}   ({100 * result.recall_at_lower:.1f}% of relevant chunks at or above it)\n"
        f"{result.pairs} graded chunks of {result.questions} questions, {result.positives} relevant.\n"
        f"At upper: accuracy {_pct(at.accuracy)}% (always 'irrelevant': {_pct(at.majority_accuracy)}%), "
        f"balanced accuracy {_pct(at.balanced_accuracy)}%, precision {_pct(at.precision)}%, "
        f"recall {_pct(at.recall)}%, ROC AUC {at.roc_auc:.3f}.\n"
        f"Verdicts: gold retrieved {agree.gold_retrieved}; not retrieved {agree.gold_not_retrieved}."
    )
    if args.dry_run:
        print("(dry run: nothing written)")
        return 0
    write = args.write is not None or _ask_to_write(target)
    if write:
        set_table_values(target, "grader", {"upper": result.upper, "lower": result.lower})
        print(f"wrote [grader] upper and lower to {target}; {_who_reads(target, args.config)}")
    else:
        print(
            f"Nothing written. To use these thresholds, run again with --write (saves them to "
            f"{target}), or pass --upper {result.upper} --lower {result.lower} to crag ask."
        )
    return 0


def _calibrate_band(args: argparse.Namespace) -> int:
    from crag._offload import run_sync
    from crag.config import Settings
    from crag.evaluation.calibrate import acalibrate_band
    from crag.evaluation.settings_file import set_table_values

    result = run_sync(lambda: acalibrate_band(
        list(zip(args.dataset, args.corpus)), Settings.load(args.config),
        target=args.target_agreement, drop_fraction=args.drop_gold, seed=args.seed,
    ))
    target = _written_to(args)
    write = args.write is not None and not args.dry_run
    if write:
        set_table_values(target, "grader", {"kind": "cascade", "band_low": result.band_low,
                                            "band_high": result.band_high})
    if args.json:
        print(json.dumps({**result.model_dump(mode="json"), "written": str(target) if write else None}))
        return 0
    print(
        f"band_low = {result.band_low}, band_high = {result.band_high}: verdicts agree with model-only "
        f"grading on {_pct(result.agreement)}% of {result.questions} questions (target "
        f"{_pct(result.target_agreement)}%), with {result.calls_per_question:.2f} model calls per "
        f"question instead of {result.chunks_per_question:.2f}."
    )
    print(f"wrote [grader] kind = \"cascade\", band_low and band_high to {target}" if write else
          "Nothing written; --write saves them (with kind = \"cascade\").")
    return 0


def _calibrate_reranker(args: argparse.Namespace, settings: Any) -> int:
    from crag.evaluation.rerank_fit import (
        calibrate_reranker,
        configured_reranker,
        table,
        toml_lines,
    )
    from crag.evaluation.settings_file import set_table_values

    section = settings.reranker
    result = calibrate_reranker(
        list(zip(args.dataset, args.corpus)), settings, configured_reranker(settings),
        name=f"reranker ({section.model or section.base_url or section.model_dir})", folds=args.folds,
        label=args.label, target_precision=args.target_precision, lower_recall=args.lower_recall,
        drop_fraction=args.drop_gold, seed=args.seed, max_chars=section.max_chars,
    )
    target = _written_to(args)
    write = args.write is not None and not args.dry_run
    if write:
        set_table_values(target, "reranker", {"upper": result.reranker.upper, "lower": result.reranker.lower})
    if args.json:
        print(json.dumps({**result.model_dump(mode="json"), "written": str(target) if write else None}))
        return 0
    print(table(result) + "\n")
    if write:
        print(f"wrote [reranker] upper and lower to {target}; {_who_reads(target, args.config, 'RERANKER')}")
    else:
        print(f"To use them, paste into crag.toml (or run again with --write [FILE]):\n\n{toml_lines(result)}")
    if settings.grader.upper is not None or settings.grader.lower is not None:
        print("note: [grader] upper/lower are set and override [reranker]'s; remove them to use these.")
    return 0


def _ask_to_write(target: Path) -> bool:
    """In a terminal, ask before writing; anywhere else (a script, CI), never write unasked."""
    if not sys.stdin.isatty():
        return False
    try:
        reply = input(f"Write upper and lower to [grader] in {target}? [y/N] ")
    except EOFError:
        return False
    return reply.strip().lower() in ("y", "yes")


def _who_reads(target: Path, config: Path | None, section: str = "GRADER") -> str:
    """Which later runs pick the file up, so that nobody is surprised by new thresholds."""
    from crag.config import CONFIG_FILE

    if config is None and target == Path(CONFIG_FILE):
        return (
            f"every crag command run in {Path.cwd()} now uses them "
            f"(flags and CRAG_{section}__UPPER / __LOWER still override)"
        )
    return f"crag commands given --config {target} use them"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _written_to(args: argparse.Namespace) -> Path:
    """The settings file `crag calibrate --write` writes: its own FILE, else --config, else ./crag.toml."""
    from crag.config import CONFIG_FILE

    if args.write is not None and args.write is not _DEFAULT_TARGET:
        return args.write
    return args.config or Path(CONFIG_FILE)
