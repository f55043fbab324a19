"""The verdict policy of the CRAG paper: Correct, Incorrect or Ambiguous from the grades."""

from __future__ import annotations

from collections.abc import Sequence

from crag.events import Grade, Verdict

# A 0-10 rating read as rating / 10 (an LLM's grade): 7 and up is Correct, 3 and below
# Incorrect. These were every grader's thresholds before the offline evaluator's were fitted
# with its weights; a grader without thresholds of its own is read with them.
RATING_THRESHOLDS = (0.677, 0.327)


def thresholds_of(grader: object, upper: float | None = None, lower: float | None = None) -> tuple[float, float]:
    """The (upper, lower) that `grader`'s scores are read with: `upper` and `lower` where given
    (a user's setting), else the grader's own `thresholds` (the offline evaluator's are fitted
    with its weights), else `RATING_THRESHOLDS`."""
    own = getattr(grader, "thresholds", None) or RATING_THRESHOLDS
    return (own[0] if upper is None else upper, own[1] if lower is None else lower)


def decide_verdict(
    grades: Sequence[Grade], upper: float, lower: float, *, coverage: float | None = None, cover: float = 0.0
) -> Verdict:
    """Correct if some chunk scores >= upper and the kept chunks together cover the question
    (`coverage` >= `cover`, when a coverage is given); Incorrect if all score < lower; else
    Ambiguous.

    A binary yes/no grader is the case `upper == lower`: any "yes" is Correct, else Incorrect.
    """
    best = max((g.score for g in grades), default=0.0)
    if best >= upper and (coverage is None or coverage >= cover):
        return Verdict.CORRECT
    if best < lower:
        return Verdict.INCORRECT
    return Verdict.AMBIGUOUS


def explain_verdict(
    grades: Sequence[Grade], upper: float, lower: float, *, coverage: float | None = None, cover: float = 0.0
) -> str:
    """`decide_verdict`'s rule as it applied to these grades, in one sentence."""
    verdict = decide_verdict(grades, upper, lower, coverage=coverage, cover=cover)
    if not grades:
        return f"Incorrect: nothing was retrieved, so no grade could reach the lower threshold {lower:g}."
    best = max(g.score for g in grades)
    n = len(grades)
    if verdict is Verdict.CORRECT:
        return f"Correct: the best of {n} grades, {best:.2f}, reached the upper threshold {upper:g}."
    if best >= upper and coverage is not None:
        return (f"Ambiguous: the best of {n} grades, {best:.2f}, reached the upper threshold {upper:g}, "
                f"but the kept chunks together cover only {coverage:.2f} of the question, below {cover:g}.")
    if verdict is Verdict.INCORRECT:
        return (f"Incorrect: all {n} grades were below the lower threshold {lower:g} "
                f"(the best was {best:.2f}).")
    passed = sum(g.score >= lower for g in grades)
    return (f"Ambiguous: the best of {n} grades, {best:.2f}, is between the lower threshold {lower:g} "
            f"and the upper {upper:g}; {passed} chunk{'s' * (passed != 1)} passed the lower one.")
