"""A run's `Explanation` as HTML: why the verdict, the grades against the thresholds, the
answer with its citations linked to the sources, and the strips refinement kept and dropped.

No scripts: the grades are an inline SVG, the citations are in-page links.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from urllib.parse import quote

from crag.app.render.layout import MONO
from crag.cost import CostRecord
from crag.trace import Explanation, GradeLine, SourceLine, StripLine

ZONE = {"upper": "#15803d", "between": "#d97706", "below": "#b91c1c"}  # a grade bar's colour
CSS = """\
.crag .why { font-size: 16px; color: #0f172a; background: #f1f5f9; border-left: 4px solid #334155;
             padding: 8px 12px; margin: 8px 0 12px; max-width: 1100px; }
.crag .explained { display: flex; flex-wrap: wrap; gap: 8px 28px; align-items: flex-start; }
.crag .explained section { max-width: 590px; }
.crag h2 { font-size: 15px; margin: 10px 0 6px; }
.crag .answer { color: #0f172a; font-size: 15px; line-height: 1.45; }
.crag .answer a, .crag .sources a { color: #1d4ed8; text-decoration: none; }
.crag .sources { margin: 4px 0; padding-left: 22px; color: #334155; }
.crag .sources li:target { background: #fef9c3; }
.crag .strips { list-style: none; padding: 0; margin: 0; }
.crag .strips li { margin: 0 0 4px; padding: 2px 6px; border-left: 3px solid; color: #0f172a; }
.crag .strips li.kept { border-color: #15803d; } .crag .strips li.dropped { border-color: #cbd5e1; color: #64748b; }
.crag .strips .score { font-family: monospace; color: #475569; margin-right: 6px; }
.crag .strips .from { color: #64748b; font-size: 12px; }
"""


def grades_svg(ex: Explanation, width: int = 560) -> str:
    """One bar per chunk's grade on a 0-1 scale, with the lower and upper thresholds as lines."""
    row, top, x0 = 24, 26, 210
    x1 = width - 56
    height = top + row * max(len(ex.grades), 1) + 10

    def at(score: float) -> float:
        return x0 + (x1 - x0) * min(max(score, 0.0), 1.0)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="grades" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" font-family="{MONO}" font-size="12">']
    for i, g in enumerate(ex.grades):
        y = top + row * i + row / 2
        zone = "upper" if g.score >= ex.upper else "between" if g.score >= ex.lower else "below"
        parts += [
            f'<text x="{x0 - 8}" y="{y:.1f}" dominant-baseline="central" text-anchor="end" '
            f'fill="#0f172a">{escape(_short(_name(g), 26))}</text>',
            f'<rect x="{x0}" y="{y - 7:.1f}" width="{x1 - x0}" height="14" fill="#f1f5f9"/>',
            f'<rect class="grade {zone}" x="{x0}" y="{y - 7:.1f}" width="{max(at(g.score) - x0, 1.5):.1f}" '
            f'height="14" rx="2" fill="{ZONE[zone]}"><title>{escape(_grade_tip(g))}</title></rect>',
            f'<text x="{x1 + 6}" y="{y:.1f}" dominant-baseline="central" fill="#334155">{g.score:.2f}</text>',
        ]
    if not ex.grades:
        parts.append(f'<text x="{x0}" y="{top + row / 2}" dominant-baseline="central" fill="#64748b">'
                     "nothing was retrieved</text>")
    for name, value, anchor in (("lower", ex.lower, "end"), ("upper", ex.upper, "start")):
        x = at(value)
        parts += [f'<line class="threshold {name}" x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" '
                  f'y2="{height - 4}" stroke="#0f172a" stroke-width="1.5" stroke-dasharray="4 3"/>',
                  f'<text x="{x + (4 if anchor == "start" else -4):.1f}" y="{top - 14}" '
                  f'dominant-baseline="central" text-anchor="{anchor}" fill="#0f172a">'
                  f'{name} {value:g}</text>']
    return "\n".join([*parts, "</svg>"])


FileLink = Callable[[SourceLine], "str | None"]  # a cited document's address, or None

# The only addresses a link drawn from a document may have: a web page, or crag serve's own
# copy of a file. A document's `url` is the document's to say (a .jsonl record, a web corpus),
# so `javascript:`, `data:` and the like, which would run in the page's origin and read its
# API key, are shown as text. Browsers drop tabs and newlines inside a URL and spaces and
# control characters around it ("java\tscript:" runs), hence nothing of either is let through.
_WEB = re.compile(r"https?://[^\s\x00-\x1f\x7f\\]+", re.IGNORECASE)
_OWN_FILE = re.compile(r"/files/[0-9a-f]+(?:#page=[A-Za-z0-9%._~-]*)?")


def safe_link(url: str | None) -> str | None:
    """`url` if a link may point at it (http, https, or crag serve's /files/ID), else None."""
    if url and (_WEB.fullmatch(url) or _OWN_FILE.fullmatch(url)):
        return url
    return None


def file_page_link(source: SourceLine) -> str | None:
    """`crag serve`'s address of a cited file, at its page (`#page=N`, which PDF viewers open)."""
    if not source.file_id:
        return None
    page = f"#page={quote(str(source.page), safe='')}" if source.page else ""
    return f"/files/{source.file_id}{page}"


def explanation_html(ex: Explanation, cost: CostRecord | None = None, link: FileLink | None = None) -> str:
    """The why of one run, for the live page (an HTML fragment): `why_html`, then `strips_html`,
    then what was worked around and what the model cost (its budget's note included)."""
    notes = "".join(f'<p class="degraded">⚠ {escape(line)}</p>' for line in ex.degraded)
    spent = f'<p class="cost">{escape(cost.line())}</p>' if cost is not None and (cost.calls or cost.cache_hits) else ""
    return why_html(ex, link) + strips_html(ex) + notes + spent


def why_html(ex: Explanation, link: FileLink | None = None) -> str:
    """The verdict rule in one sentence, the grades against the thresholds, and the answer with
    its citations linked to its sources (an HTML fragment)."""
    numbers = {s.number for s in ex.sources}

    def cite(match: re.Match[str]) -> str:
        n = int(match.group(1))
        return f'<a href="#crag-source-{n}">[{n}]</a>' if n in numbers else match.group(0)

    answer = re.sub(r"\[(\d+)\]", cite, escape(ex.answer))
    def where(s: SourceLine) -> str:
        if s.url:  # a link only to an address that runs nothing here (`safe_link`)
            web = safe_link(s.url)
            title = escape(s.title or s.url)
            return f'<a href="{escape(web)}" rel="noopener noreferrer">{title}</a>' if web else title
        name = escape(s.citation() or s.title or s.id)
        href = safe_link(link(s)) if link is not None else None
        return f'<a class="crag-file" href="{escape(href)}">{name}</a>' if href else name

    sources = "".join(
        f'<li id="crag-source-{s.number}" value="{s.number}">{escape(s.kind)}: {where(s)}</li>'
        for s in ex.sources)
    web = ""
    if ex.rewritten_query:
        web = f'<p>Web query: <b>{escape(ex.rewritten_query)}</b></p>'
    return f"""<p class="why"><b>Why:</b> {escape(ex.rule)}</p>
<div class="explained">
<section class="grading"><h2>Grades of the retrieved chunks</h2>{grades_svg(ex)}
<p><small>At or above <b>upper</b> ({ex.upper:g}) a chunk makes the run Correct; with every chunk
below <b>lower</b> ({ex.lower:g}) it is Incorrect; in between, Ambiguous.</small></p>{web}</section>
<section class="result"><h2>Answer</h2><p class="answer">{answer}</p>
{f'<h2>Sources</h2><ol class="sources">{sources}</ol>' if sources else '<p>No sources cited.</p>'}
</section>
</div>
"""


def strips_html(ex: Explanation) -> str:
    """The strips knowledge refinement kept and dropped, each with its score and source."""
    kept = [s for s in ex.strips if s.kept]
    dropped = [s for s in ex.strips if not s.kept]
    more = f" (and {ex.dropped_unlisted} more)" if ex.dropped_unlisted else ""
    return f"""<div class="explained strips-kept-dropped">
<section><h2>Kept by refinement ({len(kept)})</h2>{_strips(kept, "kept")}</section>
<section><h2>Dropped by refinement ({len(dropped)}{more})</h2>{_strips(dropped, "dropped")}</section>
</div>
"""


def _strips(strips: list[StripLine], state: str) -> str:
    if not strips:
        return "<p>none</p>"
    items = "".join(
        f'<li class="{state}"><span class="score">{s.score:.2f}</span>{escape(s.text)} '
        f'<span class="from">— {escape(s.kind)}: {escape(s.url or s.title or s.source_id[:8])}</span></li>'
        for s in strips)
    return f'<ul class="strips">{items}</ul>'


def _name(g: GradeLine) -> str:
    return g.title or f"chunk {g.chunk_id[:8]}"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _grade_tip(g: GradeLine) -> str:
    tip = f"{_name(g)}: {g.score:.3f} by {g.grader}"
    return tip + (f" ({g.note})" if g.note else "")
