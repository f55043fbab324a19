"""A run's `Explanation`, built once when it ends, from what its steps already decided.

Nothing is recomputed: the grades and verdict are in the run state, the kept strips reached
the synthesizer, the dropped ones were noted on the refine steps' records
(`crag.trace.note_dropped`), the chunks' titles on the grade step's. About 0.1 ms a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from crag.events import Grade, Source, Strip, Verdict
from crag.steps.grading import explain_verdict
from crag.trace import Explanation, GradeLine, HopLine, Location, SourceLine, StepRecord, StripLine

MAX_DROPPED = 24  # dropped strips listed, best first: enough to see what was left out
NO_WEB = "no web search is configured, so nothing was searched"
WEB_FIX = "give --web-corpus (a folder or .jsonl) or set TAVILY_API_KEY"


def no_web_note(verdict: Verdict | None, passed: int) -> str:
    """The web_search step's `degraded` note when there is no web to search."""
    if verdict is Verdict.AMBIGUOUS:
        return f"{NO_WEB}; answered only from the {passed} chunk(s) that passed the lower threshold"
    return f"{NO_WEB}; the documents' chunks were judged irrelevant, so there is no answer"


def explain(
    *,
    verdict: Verdict,
    grades: Sequence[Grade],
    upper: float,
    lower: float,
    coverage: float | None = None,
    cover: float = 0.0,
    rewritten_query: str | None,
    web: bool,
    records: Iterable[StepRecord],
    kept: Sequence[Strip],
    answer: str,
    sources: Sequence[Source],
    degraded: list[str],
) -> Explanation:
    """The why of one corrective run: grades against thresholds, the rule, strips, answer."""
    records = list(records)
    titles: dict[str, str] = {}
    dropped: list[Strip] = []
    hops: list[dict] = []
    for r in records:  # taken off the records: the explanation holds them from now on
        details, r.details = r.details, {}
        titles.update(details.get("titles", {}))
        dropped.extend(details.get("dropped", ()))
        hops.extend(details.get("hops", ()))
    # A strip is listed once: a hop scores again the strips of a document the first pass had, and
    # the question's own refine and a hop's can keep (or drop) the same sentence of one source.
    kept = _once(kept)
    shown = {(s.text, s.source_id) for s in kept}
    dropped = [s for s in _once(sorted(dropped, key=lambda s: -s.score)) if (s.text, s.source_id) not in shown]
    rule = explain_verdict(grades, upper, lower, coverage=coverage, cover=cover)
    if verdict is not Verdict.CORRECT:
        searched = f"searched the web for “{rewritten_query}”" if rewritten_query else "searched the web"
        if not web:
            rule += f" The web was needed but {NO_WEB}: {WEB_FIX}."
        elif verdict is Verdict.INCORRECT:
            rule += f" So the chunks were set aside and crag {searched}."
        else:
            rule += f" So crag kept those chunks and also {searched}."
    if not web and verdict is Verdict.AMBIGUOUS:
        rule += " The answer comes only from the chunks that passed the lower threshold."
    told: set[str] = set()
    for hop in hops:
        if not hop["strips"]:  # a hop that brought no evidence changed nothing the answer says
            continue
        found_in = ([] if hop["verdict"] == "incorrect" else ["the documents"]) + (["the web"] if hop["searched"] else [])
        where = " and ".join(found_in) or "the documents"
        if hop.get("bridge"):
            read = f" (read in “{hop['found_in']}”)" if hop.get("found_in") else ""
            line = (f" The first pass answered the question only in part: crag hopped to “{hop['bridge']}”{read} "
                    f"and asked “{hop['question']}” (grades {hop['verdict']}; {hop['strips']} strips from {where}).")
        else:
            line = (f" The question needed another hop: crag also asked “{hop['question']}” "
                    f"(grades {hop['verdict']}; {hop['strips']} strips from {where}).")
        if line not in told:  # two bridges to one name, found in two strips, are told once
            told.add(line)
            rule += line
    return Explanation(
        verdict=verdict.value,
        rule=rule,
        upper=upper,
        lower=lower,
        grades=[GradeLine(chunk_id=g.chunk_id, score=g.score, grader=g.grader, note=g.note,
                          title=titles.get(g.chunk_id)) for g in grades],
        rewritten_query=rewritten_query,
        web=web,
        hops=[HopLine(**hop) for hop in hops],
        strips=[_line(s, True) for s in kept] + [_line(s, False) for s in dropped[:MAX_DROPPED]],
        dropped_unlisted=max(0, len(dropped) - MAX_DROPPED),
        answer=answer,
        sources=[SourceLine(number=s.number, kind=s.kind, id=s.id, title=s.title, url=s.url,
                            **s.model_dump(include=set(Location.model_fields)))
                 for s in sources],
        degraded=degraded,
    )


def _once(strips: Iterable[Strip]) -> list[Strip]:
    """`strips` without repeats of a sentence from one source, the first copy kept."""
    once: dict[tuple[str, str], Strip] = {}
    for s in strips:
        once.setdefault((s.text, s.source_id), s)
    return list(once.values())


def _line(s: Strip, kept: bool) -> StripLine:
    return StripLine(text=s.text, source_id=s.source_id, kind=s.kind, score=s.score, kept=kept,
                     title=s.title, url=s.url)
