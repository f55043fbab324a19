"""Summarises an evaluation's outcomes: per system, overall and split by gold-present/dropped."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from crag.cost import CostRecord, total
from crag.evaluation.metrics import (
    VERDICTS,
    BinaryReport,
    VerdictAgreement,
    binary_report,
    mean,
    percentile,
    rate,
    verdict_agreement,
)
from crag.evaluation.runner import EvalRun, Outcome
from crag.steps.grading.verdict import thresholds_of

SPLITS = ("all", "gold-present", "gold-dropped")


class EvaluatorQuality(BaseModel):
    """Each retrieved chunk's grade, thresholded at `upper`, against two labels, or three
    when the questions are multi-hop."""

    is_gold: BinaryReport = Field(description="Label: the chunk is from the gold passage.")
    has_answer: BinaryReport = Field(description="Label: the chunk contains a gold answer string.")
    is_support: BinaryReport | None = Field(
        None,
        description="Label: the chunk is from a supporting passage; None when every "
        "question's only supporting passage is its gold one.",
    )


class SplitSummary(BaseModel):
    """One system's results on one split of the questions."""

    questions: int
    answer_accuracy: float | None = Field(description="A gold answer occurs in the answer.")
    first_sentence_accuracy: float | None = Field(
        None, description="A gold answer occurs in the answer's first sentence."
    )
    best_sentence_f1: float | None = Field(
        None, description="Mean token F1 (SQuAD) of each answer's best sentence."
    )
    gold_retrieved: float | None
    gold_in_context: float | None
    verdicts: dict[str, float] | None = None
    verdict_agreement: VerdictAgreement | None = None
    evaluator: EvaluatorQuality | None = None
    llm_calls_per_question: float | None
    search_calls_per_question: float | None
    cost: CostRecord | None = Field(None, description="Model calls, tokens and money of every run, added up.")
    tokens_per_question: float | None = None
    money_per_question: float | None = None
    latency_p50: float | None
    latency_p95: float | None
    errors: int
    degraded: int


class SystemSummary(BaseModel):
    name: str
    description: str
    seconds: float
    splits: dict[str, SplitSummary]


class EvalReport(BaseModel):
    """The whole evaluation, as `crag eval --json` prints it."""

    dataset: str
    corpus: str
    web_corpus: str = Field(description="Every file searched as the web, joined by ' + '.")
    web_corpora: list[str] = Field(default_factory=list, description="Every web corpus file.")
    drop_gold: float
    seed: int
    questions: int
    gold_dropped_questions: int
    index_chunks: int
    grader: dict[str, object]
    synthesizer: str
    concurrency: int
    seconds: float
    index_seconds: float
    systems: list[SystemSummary]

    def system(self, name: str) -> SystemSummary:
        for s in self.systems:
            if s.name == name:
                return s
        raise KeyError(name)


def summarize_split(
    outcomes: Sequence[Outcome], *, grading: bool, upper: float, multi_hop: bool = False
) -> SplitSummary:
    """Answer scores, context rates, verdicts, evaluator quality, cost and latency.

    `multi_hop` adds the "is a supporting passage" label to the evaluator's quality.
    """
    ran = [o for o in outcomes if o.error is None]
    # A failed run counts as wrong (and scores 0) in every answer score.
    summary = SplitSummary(
        questions=len(outcomes),
        answer_accuracy=rate(o.correct for o in outcomes),
        first_sentence_accuracy=rate(o.first_sentence_correct for o in outcomes),
        best_sentence_f1=mean(o.best_sentence_f1 for o in outcomes),
        gold_retrieved=rate(o.gold_retrieved for o in ran),
        gold_in_context=rate(o.gold_in_context for o in ran),
        # Every run's calls, failed ones' too: they were made, and paid for (issue 31).
        llm_calls_per_question=mean(o.llm_calls for o in outcomes),
        search_calls_per_question=mean(o.search_calls for o in ran),
        latency_p50=percentile((o.seconds for o in ran), 50),
        latency_p95=percentile((o.seconds for o in ran), 95),
        errors=len(outcomes) - len(ran),
        degraded=sum(1 for o in ran if o.degraded),
    )
    costs = [o.cost for o in outcomes if o.cost is not None]
    if costs:
        summary.cost = total(costs)
        summary.tokens_per_question = (summary.cost.tokens_in + summary.cost.tokens_out) / len(costs)
        if summary.cost.money is not None:
            summary.money_per_question = summary.cost.money / len(costs)
    if grading and ran:
        summary.verdicts = {v: sum(o.verdict == v for o in ran) / len(ran) for v in VERDICTS}
        summary.verdict_agreement = _verdict_agreement(ran)
        chunks = [c for o in ran for c in o.chunks]
        scores = [c.score for c in chunks]
        summary.evaluator = EvaluatorQuality(
            is_gold=binary_report([c.is_gold for c in chunks], scores, upper),
            has_answer=binary_report([c.has_answer for c in chunks], scores, upper),
            is_support=(
                binary_report([c.is_support for c in chunks], scores, upper) if multi_hop else None
            ),
        )
    return summary


def _verdict_agreement(outcomes: Sequence[Outcome]) -> VerdictAgreement:
    """Verdicts against retrieval truth, for the outcomes that know whether gold was retrieved."""
    known = [o for o in outcomes if o.gold_retrieved is not None and o.verdict is not None]
    return verdict_agreement(
        [o.verdict or "" for o in known],
        [bool(o.gold_retrieved) for o in known],
        [max((c.score for c in o.chunks), default=0.0) for o in known],
    )


def summarize(run: EvalRun) -> EvalReport:
    """The report of a finished evaluation."""
    settings = run.settings
    configured = thresholds_of(None, settings.grader.upper, settings.grader.lower)
    graded = [run.thresholds[s.name] for s in run.systems if s.grading and s.name in run.thresholds]
    upper, lower = graded[0] if graded else configured  # the grader's own, unless the settings set them
    llm = settings.llm.configured
    grader_kind = (
        "llm"
        if settings.grader.kind == "llm" or (settings.grader.kind == "auto" and llm)
        else "lexical"
    )
    synth_kind = settings.synthesizer.kind
    if synth_kind == "auto":
        synth_kind = "llm" if llm else "extractive"
    multi_hop = any(q.multi_hop for q in run.questions)
    systems = []
    for system in run.systems:
        mine = [o for o in run.outcomes if o.system == system.name]
        splits = {
            split: summarize_split(
                [o for o in mine if split == "all" or o.split == split],
                grading=system.grading,
                upper=run.thresholds.get(system.name, (upper, lower))[0],
                multi_hop=multi_hop,
            )
            for split in SPLITS
        }
        systems.append(
            SystemSummary(
                name=system.name,
                description=system.description,
                seconds=round(run.per_system_seconds.get(system.name, 0.0), 3),
                splits=splits,
            )
        )
    return EvalReport(
        dataset=str(run.options.dataset),
        corpus=str(run.options.corpus),
        web_corpus=" + ".join(str(p) for p in run.options.web_corpora),
        web_corpora=[str(p) for p in run.options.web_corpora],
        drop_gold=run.options.drop_gold,
        seed=run.options.seed,
        questions=len(run.questions),
        gold_dropped_questions=sum(run.drop.is_dropped(q) for q in run.questions),
        index_chunks=run.index_chunks,
        grader={"kind": grader_kind, "upper": upper, "lower": lower},
        synthesizer=synth_kind,
        concurrency=run.concurrency,
        seconds=round(run.seconds, 3),
        index_seconds=round(run.index_seconds, 3),
        systems=systems,
    )
