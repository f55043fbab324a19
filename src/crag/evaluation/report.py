"""Writes an evaluation down: Markdown tables, a JSON file, per-question outcomes, PNG charts.

Charts need matplotlib (`pip install "crag-workflows[eval]"`); it is drawn with the Agg backend, so
no display is needed. Without it, everything but the charts is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from crag.evaluation.metrics import BinaryReport
from crag.evaluation.runner import Outcome
from crag.evaluation.summary import SPLITS, EvalReport, SplitSummary, SystemSummary

SPLIT_TITLES = {"all": "all", "gold-present": "gold present", "gold-dropped": "gold dropped"}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1
) -> list[str]:
    """A Markdown table; the first `text_columns` columns are left-aligned, numbers right."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i < text_columns else "---:" for i in range(len(header))) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def markdown(report: EvalReport) -> str:
    """The evaluation as Markdown: setup, then one table per question asked of it."""
    split_counts = {
        name: report.systems[0].splits[name].questions if report.systems else 0 for name in SPLITS
    }
    lines = [
        f"# crag eval: {Path(report.dataset).name}",
        "",
        _setup(report),
        "",
        (
            "An answer is right when a gold answer occurs in it (both normalised as in SQuAD, "
            "matched on word boundaries)."
        ),
        "",
        "## Answer accuracy (%)",
        "",
        *_table(
            ["system", *(f"{SPLIT_TITLES[s]} ({split_counts[s]})" for s in SPLITS)],
            [
                [s.name, *(_pct(s.splits[x].answer_accuracy) for x in SPLITS)]
                for s in report.systems
            ],
        ),
        "",
        *_stricter_scores(report, split_counts),
        "",
        "## Gold passage retrieved / reaching the synthesizer (%)",
        "",
        *_table(
            ["system", *(SPLIT_TITLES[s] for s in SPLITS)],
            [
                [
                    s.name,
                    *(
                        f"{_pct(s.splits[x].gold_retrieved)} / {_pct(s.splits[x].gold_in_context)}"
                        for x in SPLITS
                    ),
                ]
                for s in report.systems
            ],
        ),
    ]
    graders = [s for s in report.systems if s.splits["all"].verdicts is not None]
    if graders:
        rows = []
        for s in graders:
            for x in SPLITS:
                part = s.splits[x]
                agree = part.verdict_agreement
                rows.append(
                    [
                        s.name,
                        SPLIT_TITLES[x],
                        *(
                            _pct((part.verdicts or {}).get(v))
                            for v in ("correct", "ambiguous", "incorrect")
                        ),
                        _pct(agree.accuracy if agree else None),
                        _pct(agree.decisive_accuracy if agree else None),
                        _pct(agree.unsafe_correct if agree else None),
                    ]
                )
        lines += [
            "",
            "## Verdicts (%)",
            "",
            (
                "Verdict accuracy: Correct when the gold passage was retrieved, Incorrect when it "
                "was not (Ambiguous counts as neither); decisive: the same among the questions not "
                "judged Ambiguous. Unsafe: Correct although the gold passage was not retrieved."
            ),
            "",
            *_table(
                [
                    "system",
                    "split",
                    "correct",
                    "ambiguous",
                    "incorrect",
                    "verdict accuracy",
                    "decisive",
                    "unsafe",
                ],
                rows,
                2,
            ),
            "",
            "Verdict by whether the gold passage was retrieved (questions, all splits):",
            "",
        ]
        table_rows = []
        for s in graders:
            agree = s.splits["all"].verdict_agreement
            if agree is None:
                continue
            for title, counts in (
                ("retrieved", agree.gold_retrieved),
                ("not retrieved", agree.gold_not_retrieved),
            ):
                table_rows.append(
                    [
                        s.name,
                        title,
                        *(str(counts[v]) for v in ("correct", "ambiguous", "incorrect")),
                    ]
                )
            table_rows.append([s.name, "ROC AUC of the best grade", _num(agree.roc_auc), "", ""])
        lines += _table(
            ["system", "gold passage", "correct", "ambiguous", "incorrect"], table_rows, 2
        )
        lines += [
            "",
            "## Evaluator: each retrieved chunk, grade >= upper means relevant",
            "",
            (
                "Relevant chunks are few, so accuracy flatters: compare it with always answering "
                '"irrelevant", and read balanced accuracy (0.5 for any constant answer) and ROC AUC.'
                + (_SUPPORT_NOTE if any(_has_support_label(s) for s in graders) else "")
            ),
            "",
        ]
        eval_rows = []
        for s in graders:
            for x in SPLITS:
                ev = s.splits[x].evaluator
                if ev is None:
                    continue
                for label, rep in (
                    ("is the gold passage", ev.is_gold),
                    ("contains an answer", ev.has_answer),
                    ("is a supporting passage", ev.is_support),
                ):
                    if rep is not None:  # no support label on single-passage questions
                        eval_rows.append([s.name, SPLIT_TITLES[x], label, *_binary_cells(rep)])
        lines += _table(
            [
                "system",
                "split",
                "label",
                "chunks",
                "relevant",
                "accuracy",
                "always irrelevant",
                "balanced acc.",
                "ROC AUC",
                "precision",
                "recall",
            ],
            eval_rows,
            3,
        )
    lines += [
        "",
        "## Cost and latency (per question)",
        "",
        *_table(
            ["system", "LLM calls", "tokens", "cached grades", "$", "searches", "p50 ms", "p95 ms",
             "errors", "degraded", "wall s"],
            [
                [
                    s.name,
                    _num(s.splits["all"].llm_calls_per_question, 2),
                    _num(s.splits["all"].tokens_per_question, 0),
                    _cache_hits(s.splits["all"]),
                    _num(s.splits["all"].money_per_question, 6),
                    _num(s.splits["all"].search_calls_per_question, 2),
                    _ms(s.splits["all"].latency_p50),
                    _ms(s.splits["all"].latency_p95),
                    str(s.splits["all"].errors),
                    str(s.splits["all"].degraded),
                    f"{s.seconds:.1f}",
                ]
                for s in report.systems
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def _cache_hits(split: SplitSummary) -> str:
    """Grades read from the grade cache, per question."""
    if split.cost is None or not split.questions:
        return "–"
    return f"{split.cost.cache_hits / split.questions:.2f}"


_SUPPORT_NOTE = (
    ' "Is a supporting passage": from any passage the answer draws on (a multi-hop question '
    "has several), the gold one included."
)


def _has_support_label(system: SystemSummary) -> bool:
    evaluator = system.splits["all"].evaluator
    return evaluator is not None and evaluator.is_support is not None


def _stricter_scores(report: EvalReport, split_counts: dict[str, int]) -> list[str]:
    """The section of answer scores stricter than the headline one, per system and split."""
    rows = []
    for s in report.systems:
        rows.append(
            [s.name, "first sentence", *(_pct(s.splits[x].first_sentence_accuracy) for x in SPLITS)]
        )
        rows.append(
            [s.name, "best-sentence F1", *(_pct(s.splits[x].best_sentence_f1) for x in SPLITS)]
        )
    return [
        "## Stricter answer scores (%)",
        "",
        (
            "First sentence: a gold answer occurs in the answer's first sentence. Best-sentence "
            "F1: SQuAD token F1 of the answer's best sentence against the best gold answer "
            "(citation markers ignored), so a short answer scores higher."
        ),
        "",
        *_table(
            ["system", "score", *(f"{SPLIT_TITLES[x]} ({split_counts[x]})" for x in SPLITS)],
            rows,
            2,
        ),
    ]


def _setup(report: EvalReport) -> str:
    """One paragraph: what was asked of which index, with which components."""
    grader = report.grader
    web = " + ".join(Path(f).name for f in report.web_corpora or [report.web_corpus])
    return (
        f"{report.questions} questions; the gold passage of {report.gold_dropped_questions} is not "
        f"in the index (--drop-gold {report.drop_gold}, --seed {report.seed}); web search: BM25 "
        f"over {web}. Index: {report.index_chunks} chunks. "
        f"Grader: {grader['kind']}, upper {grader['upper']}, lower {grader['lower']}. "
        f"Synthesizer: {report.synthesizer}. {report.seconds:.1f} s in all (index "
        f"{report.index_seconds:.1f} s), {report.concurrency} question(s) at a time."
    )


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{1000 * seconds:.1f}"


def _binary_cells(rep: BinaryReport) -> list[str]:
    return [
        str(rep.n),
        str(rep.positives),
        _pct(rep.accuracy),
        _pct(None if rep.n == 0 else (rep.n - rep.positives) / rep.n),
        _pct(rep.balanced_accuracy),
        _num(rep.roc_auc),
        _pct(rep.precision),
        _pct(rep.recall),
    ]


def charts_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_outputs(report: EvalReport, outcomes: Sequence[Outcome], out_dir: Path) -> list[Path]:
    """Write eval.json, eval.md, outcomes.jsonl and (with matplotlib) three PNG charts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "eval.json", out_dir / "eval.md", out_dir / "outcomes.jsonl"]
    written[0].write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    written[1].write_text(markdown(report), encoding="utf-8")
    with open(written[2], "w", encoding="utf-8") as f:
        f.writelines(
            json.dumps(outcome.model_dump(mode="json"), ensure_ascii=False) + "\n"
            for outcome in outcomes
        )
    if charts_available():
        written += draw_charts(report, outcomes, out_dir)
    return written


def draw_charts(report: EvalReport, outcomes: Sequence[Outcome], out_dir: Path) -> list[Path]:
    """accuracy.png (by system and split), verdicts.png (verdict mix), latency.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    names = [s.name for s in report.systems]

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(SPLITS)
    for i, split in enumerate(SPLITS):
        values = [100 * (s.splits[split].answer_accuracy or 0.0) for s in report.systems]
        xs = [j + (i - (len(SPLITS) - 1) / 2) * width for j in range(len(names))]
        bars = ax.bar(xs, values, width, label=SPLIT_TITLES[split])
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("answer accuracy (%)")
    ax.set_ylim(0, 118)
    ax.set_title(f"{Path(report.dataset).name}, --drop-gold {report.drop_gold}")
    ax.legend(loc="upper center", ncols=len(SPLITS), fontsize=8, frameon=False)
    paths.append(_save(fig, out_dir / "accuracy.png"))

    graders = [s for s in report.systems if s.splits["all"].verdicts is not None]
    if graders:
        fig, ax = plt.subplots(figsize=(7, 4))
        labels, mixes = [], []
        for s in graders:
            for split in SPLITS:
                labels.append(f"{s.name}\n{SPLIT_TITLES[split]}")
                mixes.append(s.splits[split].verdicts or {})
        bottom = [0.0] * len(labels)
        for verdict, color in (
            ("correct", "#4c9a6a"),
            ("ambiguous", "#e0b040"),
            ("incorrect", "#c0504d"),
        ):
            values = [100 * m.get(verdict, 0.0) for m in mixes]
            ax.bar(range(len(labels)), values, 0.6, bottom=bottom, label=verdict, color=color)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel("questions (%)")
        ax.set_title("verdict mix")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        paths.append(_save(fig, out_dir / "verdicts.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    data = [
        [1000 * o.seconds for o in outcomes if o.system == name and o.error is None] or [0.0]
        for name in names
    ]
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_ylabel("latency per question (ms)")
    ax.set_title("latency (box: quartiles; whiskers: 1.5 IQR)")
    paths.append(_save(fig, out_dir / "latency.png"))
    return paths


def _save(fig: object, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=110)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return path
