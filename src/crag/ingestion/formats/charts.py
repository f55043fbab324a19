"""A chart's words (DrawingML, as PowerPoint, Excel and Word keep charts): its title, its axes'
titles, and its data as a table, a row per category with a column per series.

A chart drawn from numbers is still text in its file: the values a viewer reads off the bars
are cached beside the drawing, so "how many ducks in 2021?" can be answered from a slide or a
sheet's chart rather than reported as "in an image".
"""

from __future__ import annotations

from xml.etree import ElementTree

_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_KINDS = {"area": "Area", "bar": "Bar", "bubble": "Bubble", "doughnut": "Doughnut", "line": "Line",
          "ofPie": "Pie", "pie": "Pie", "radar": "Radar", "scatter": "Scatter", "stock": "Stock",
          "surface": "Surface"}


def chart_text(xml: bytes) -> str:
    """The chart's title and axis titles, "<Kind> chart", then its data: a header line of the
    series' names and a line per category ("2021 | 150 | 100"), cells separated by " | " as a
    Word table's are. Empty when the chart holds no words."""
    space = ElementTree.fromstring(xml)
    chart = space.find(f"{_C}chart")
    if chart is None:
        return ""
    parts = [_rich(title) for title in chart.iter(f"{_C}title")]  # the chart's, then its axes'
    plot = chart.find(f"{_C}plotArea")
    for kind in plot if plot is not None else ():
        name = kind.tag.removeprefix(_C).removesuffix("3DChart").removesuffix("Chart")
        if name not in _KINDS:
            continue
        parts.append(f"{_KINDS[name]} chart")
        series = kind.findall(f"{_C}ser")
        table = _table(series)
        if table:
            parts.append("\n".join(table))
    return "\n\n".join(part for part in parts if part.strip())


def _rich(title: ElementTree.Element) -> str:
    """A title's text: its own runs, else the cell it names (the cached value)."""
    runs = "".join(t.text or "" for t in title.iter(f"{_A}t"))
    return " ".join((runs or " ".join(_points(title, "tx"))).split())


def _table(series: list[ElementTree.Element]) -> list[str]:
    names = [" ".join(_points(one, "tx")) or f"Series {n}" for n, one in enumerate(series, 1)]
    categories = next((_points(one, "cat") or _points(one, "xVal") for one in series), [])
    columns = [_points(one, "val") or _points(one, "yVal") for one in series]
    if not any(columns) and not categories:
        return [" | ".join(names)] if series else []
    rows = max([len(categories), *map(len, columns)])
    lines = [" | ".join(["", *names]).strip()]
    for row in range(rows):
        cells = [categories[row] if row < len(categories) else ""]
        cells += [column[row] if row < len(column) else "" for column in columns]
        lines.append(" | ".join(cells))
    return lines


def _points(element: ElementTree.Element, part: str) -> list[str]:
    """The cached values of a series' `part` (tx, cat, val...), in their index order; a point
    left out (a blank cell) is an empty string."""
    holder = element.find(f"{_C}{part}")
    if holder is None:
        return []
    literal = holder.find(f"{_C}v")  # a name typed in, not taken from a cell
    if literal is not None:
        return [literal.text or ""]
    cache = next((node for node in holder.iter() if node.tag in (
        f"{_C}strCache", f"{_C}numCache", f"{_C}strLit", f"{_C}numLit", f"{_C}multiLvlStrCache")), None)
    if cache is None:
        return []
    points: dict[int, str] = {}
    numbers = cache.tag in (f"{_C}numCache", f"{_C}numLit")
    for point in cache.iter(f"{_C}pt"):
        value = point.find(f"{_C}v")
        index = int(point.get("idx", len(points)))
        text = (value.text or "") if value is not None else ""
        # a multi-level category keeps its levels apart; its first level names the point
        points.setdefault(index, _shortest(text) if numbers else text)
    count = cache.find(f"{_C}ptCount")
    size = int(count.get("val", 0)) if count is not None else 0
    size = min(max(size, max(points, default=-1) + 1), 100_000)  # a damaged count, not a memory bomb
    return [points.get(n, "") for n in range(size)]


def _shortest(number: str) -> str:
    """A cached number as a person reads it: "4.4000000000000004" (a float's binary noise, as
    Excel stores it) is 4.4; any other text as it is."""
    try:
        shortest = repr(float(number)).removesuffix(".0")
    except ValueError:
        return number
    return shortest if len(shortest) < len(number) and "e" not in shortest and "n" not in shortest else number
