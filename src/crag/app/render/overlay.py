"""One run drawn on its workflow's graph: the path taken lit, the rest dimmed, and a timeline.

A step is on the path if it ran (it has a record in the trace); an event is on the path if a
step that ran emitted it, or took it as input (the start event); an edge is on the path if
both its ends are and, from a step to an event, that step emitted that event.
"""

from __future__ import annotations

import math
from collections import defaultdict
from html import escape

from workflows import Workflow
from workflows.representation import WorkflowGraph

from crag.app.render.explain import CSS as EXPLAIN_CSS
from crag.app.render.explain import FileLink, strips_html, why_html
from crag.app.render.layout import MONO, graph_of, layout
from crag.app.render.svg import MARK, Highlight, about, page, svg, text
from crag.errors import TraceError
from crag.trace import RunTrace, StepRecord

VERDICT = {  # verdict: (badge colour, what it meant for the run)
    "correct": ("#15803d", "retrieval was relevant: answered from your documents"),
    "ambiguous": ("#b45309", "unsure: answered from your documents and a web search, joined"),
    "incorrect": ("#b91c1c", "retrieval was discarded: the query was rewritten for a web search"),
}
BAR = "#3b82f6"
CSS = """\
.crag .query { font-size: 17px; color: #0f172a; margin: 6px 0 10px; }
.crag .verdict { display: inline-block; padding: 3px 12px; border-radius: 999px; color: #fff;
                 font-weight: 700; letter-spacing: .04em; text-transform: uppercase; }
.crag .facts b { color: #0f172a; } .crag .degraded { color: #92400e; }
.crag .run { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.crag figure { margin: 0; } .crag figcaption { font-weight: 600; margin: 4px 0 6px; }
"""


def seconds(s: float) -> str:
    """A duration for people: `0.4 ms`, `38 ms`, `1.24 s`."""
    if s < 0.01:
        return f"{s * 1000:.1f} ms"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def _note(records: list[StepRecord]) -> str:
    """What a step did in this run, short enough for its box: time, then calls."""
    parts = [f"{len(records)}×"] if len(records) > 1 else []
    parts.append(seconds(sum(r.seconds for r in records)))
    every = [part for r in records for part in r.walk()]  # a hop's sub-steps count as the hop's
    llm, search = sum(r.llm_calls for r in every), sum(r.search_calls for r in every)
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in every)
    cached = sum(r.cache_hits for r in every)
    parts += [f"{llm} LLM"] * bool(llm) + [f"{search} search"] * bool(search)
    parts += [f"{tokens} tok"] * bool(tokens) + [f"{cached} cached"] * bool(cached)
    parts += ["error"] * any(r.error for r in records)
    return " · ".join(parts)


def _tip(r: StepRecord) -> str:
    lines = [f"ran {seconds(r.seconds)}, from {r.started:.3f} s to {r.ended:.3f} s",
             f"in: {r.input_event}; out: {', '.join(r.output_events) or 'nothing'}",
             f"LLM calls: {r.llm_calls}, tokens: {r.prompt_tokens} in, {r.completion_tokens} out"
             + (" (estimated: the server reported none)" if r.estimated_tokens else "")
             + (f", {r.cache_hits} grades from the cache" if r.cache_hits else "")
             + f"; searches: {r.search_calls}"]
    if r.error:
        lines.append(f"error: {r.error}")
    if r.degraded:
        lines.append(f"degraded: {r.degraded}")
    for child in r.substeps:
        calls = f", {child.llm_calls} LLM" * bool(child.llm_calls) + f", {child.search_calls} search" * bool(child.search_calls)
        lines.append(f"└ {child.name}: {seconds(child.seconds)}{calls}")
    return "\n".join(lines)


def run_path(graph: WorkflowGraph, trace: RunTrace) -> tuple[dict[str, str], Highlight]:
    """Notes for the steps that ran, and the run's path, over the workflow's graph.

    Raises TraceError if the trace names steps the graph does not have (another workflow's).
    """
    step_ids = {n.id for n in graph.nodes if n.node_type == "step"}
    records: dict[str, list[StepRecord]] = defaultdict(list)
    for r in trace.steps:
        records[r.name].append(r)
    unknown = sorted(set(records) - step_ids)
    if unknown:
        raise TraceError(
            f"The trace has step(s) {', '.join(unknown)} that {graph.name} does not have; "
            f"was it recorded with another workflow? Its steps are: {', '.join(sorted(step_ids))}."
        )
    emitted = {(r.name, e) for r in trace.steps for e in r.output_events}
    seen = {e for _, e in emitted} | {r.input_event for r in trace.steps}
    events = {n.id for n in graph.nodes if n.node_type == "event" and n.label in seen}
    label = {n.id: n.label for n in graph.nodes}
    edges = {
        (e.source, e.target) for e in graph.edges
        if (e.source in records and e.target in events and (e.source, label[e.target]) in emitted)
        or (e.source in events and e.target in records)
    }
    hl = Highlight(nodes=set(records) | events, edges=edges)
    for name, recs in records.items():
        hl.tips[name] = "\n".join(_tip(r) for r in recs)
        if any(r.error for r in recs):
            hl.marks[name] = "error"
        elif any(r.degraded for r in recs):
            hl.marks[name] = "degraded"
    return {name: _note(recs) for name, recs in records.items()}, hl


def _tick(total: float) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving at most five ticks over `total`."""
    raw = max(total, 1e-6) / 5
    base = 10 ** math.floor(math.log10(raw))
    return next(base * m for m in (1, 2, 5, 10) if base * m >= raw)


def timeline_svg(trace: RunTrace, width: int = 460) -> str:
    """A Gantt chart of the run: one bar per step from its start to its end, in start order.

    Overlapping bars are steps that ran concurrently (the speculative rewrite beside grading,
    the two branches of an Ambiguous verdict).
    """
    rows = _timeline_rows(trace)
    recs = [r for r, _ in rows]
    total = max([trace.seconds, *(r.ended for r in recs)]) or 1e-6
    top, row, bar_h = 30, 24, 14
    x0 = 14 + 7.3 * max((len(indent + _label(r.name)) for r, indent in rows), default=4)
    x1 = width - 74  # the right-hand column holds each step's duration

    def at(t: float) -> float:
        return x0 + (x1 - x0) * t / total

    height = top + row * len(recs) + 8
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" '
             f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'font-family="{MONO}" font-size="12">']
    step = _tick(total)
    for k in range(int(total / step + 1e-9) + 1):
        x, label = at(k * step), seconds(k * step).replace(".0 ", " ") if k else "0"
        parts += [f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 4}" '
                  'stroke="#e2e8f0"/>',
                  text(x, top - 18, label, text_anchor="middle", font_size="11", fill="#64748b")]
    for i, (r, indent) in enumerate(rows):
        y = top + row * i + row / 2
        colour = MARK["error"] if r.error else MARK["degraded"] if r.degraded else SUB_BAR if indent else BAR
        w = max(at(r.ended) - at(r.started), 2.0)
        tip = f"{escape(r.name)}: {escape(_tip(r))}"
        parts += [text(x0 - 10, y, indent + _label(r.name), text_anchor="end", fill="#475569" if indent else "#0f172a"),
                  f'<rect class="bar" x="{at(r.started):.1f}" y="{y - bar_h / 2:.1f}" '
                  f'width="{w:.1f}" height="{bar_h}" rx="3" fill="{colour}">'
                  f'<title>{tip}</title></rect>',
                  text(width - 6, y, seconds(r.seconds), text_anchor="end", fill="#334155")]
    return "\n".join([*parts, "</svg>"])


SUB_BAR = "#94a3b8"  # a sub-step's bar: work done inside the step drawn above it
LABEL_CHARS = 30
"""Most characters of a timeline label: a hop's sub-steps are named after its bridge ("hop to
“History of the lithium-ion battery”: web_search"), and a label that long left the bars a
sliver. The middle gives way, the kind of work at the end stays; the bar's tooltip names it whole."""


def _label(name: str) -> str:
    if len(name) <= LABEL_CHARS:
        return name
    tail = name[name.rfind(":"):] if ":" in name else ""
    return name[: LABEL_CHARS - len(tail) - 1] + "…" + tail


def _timeline_rows(trace: RunTrace) -> list[tuple[StepRecord, str]]:
    """The steps in start order, each followed by its sub-steps (a hop's retrieve, grade,
    refine and search), marked for indenting."""
    rows: list[tuple[StepRecord, str]] = []
    for step in sorted(trace.steps, key=lambda r: (r.started, r.ended)):
        rows.append((step, ""))
        rows += [(child, "└ ") for child in sorted(step.substeps, key=lambda r: (r.started, r.ended))]
    return rows


def trace_html(
    workflow: Workflow | type[Workflow], trace: RunTrace, *, title: str = "crag run", link: FileLink | None = None
) -> str:
    """A complete offline HTML page of one run: why its verdict (grades against the thresholds,
    the rule, the strips kept and dropped, the answer and its sources), its path on the graph,
    times and calls. `link` gives a cited document's address (`crag serve`'s: the file at its page)."""
    return page(title, trace_body(workflow, trace, title=title, link=link), CSS + EXPLAIN_CSS)


def trace_body(
    workflow: Workflow | type[Workflow], trace: RunTrace, *, title: str = "crag run", link: FileLink | None = None
) -> str:
    """`trace_html`'s page content, without the page around it."""
    graph = graph_of(workflow)
    notes, hl = run_path(graph, trace)
    lay = layout(graph, notes)
    n_steps = sum(n.kind == "step" for n in lay.nodes.values())
    colour, meaning = VERDICT.get(trace.verdict or "", ("#475569", "no verdict recorded"))
    facts = " · ".join([
        f"<b>{seconds(trace.seconds)}</b>",
        f"{len(notes)} of {_plural(n_steps, 'step')} ran",
        _plural(trace.llm_calls, "LLM call"),
        _plural(trace.search_calls, "web search", "web searches"),
        f"{trace.tokens} tokens" if trace.tokens else "tokens: none reported",
        f"started {trace.started_at:%Y-%m-%d %H:%M:%S}",
    ])
    issues = [f"{s.name}: {s.error}" for s in trace.steps if s.error]
    issues += [f"{s.name}: {s.degraded}" for s in trace.steps if s.degraded]
    issues += trace.notes  # the run's own limits: a budget reached
    verdict = escape(trace.verdict or "none")
    badge = f'<span class="verdict" style="background:{colour}">{verdict}</span>'
    ex = trace.explanation
    why, strips = (why_html(ex, link), strips_html(ex)) if ex is not None else ("", "")
    return f"""<h1>{escape(title)}</h1>
<p class="query">“{escape(trace.query)}”</p>
<p class="facts">{badge} {facts}</p>
<p>{escape(meaning)}.</p>{"".join(f'<p class="degraded">⚠ {escape(line)}</p>' for line in issues)}
{why}<h2>The run's path</h2>
<div class="run">
<figure class="graph">{svg(lay, hl)}</figure>
<figure><figcaption>Timeline</figcaption>{timeline_svg(trace)}
<p><small>One bar per step, from its start to its end;
overlapping bars ran concurrently.</small></p>
</figure>
</div>
<p><small>{about(workflow).rstrip(".")}. Hover a step for its events, times and calls.</small></p>
{strips}"""
