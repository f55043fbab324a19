"""What reading a container of records (.jsonl, .csv, .tsv) found: its lines, as the readers of
each kind take them, and the records left out. Apart from `records`, which reads them, and
`table`, which makes a table's rows into documents, so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crag.ingestion.files import ReadLimits

Line = tuple[int, "str | None"]
"""(line number from 1, the line without its end); None for a line over the record limit, left unread."""


@dataclass
class RecordsRead:
    """What `stream_records` found beside its documents, complete once they are consumed."""

    limit_mb: float = ReadLimits.max_text_mb  # the most text one record's line may hold, in millions of characters
    sha256: str = ""
    records: int = 0  # records read into documents (a table's rows; a corpus's lines with text)
    left_out: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)

    def line(self, path: Path) -> str | None:
        """One line naming the records left out, the first with its reason; None if none were."""
        if not self.left_out:
            return None
        (first, reason), more = self.left_out[0], [n for n, _ in self.left_out[1:]]
        others = ""
        if more:
            lines = ", ".join(map(str, more[:5])) + (", ..." if len(more) > 5 else "")
            others = f", with {len(more):,} more record{'s' * (len(more) > 1)} (line{'s' * (len(more) > 1)} {lines})"
        read = f"{self.records:,} record{'s' * (self.records != 1)}"
        return f"{path}:{first}: {reason}; left out{others}, and the rest read ({read})."


def over_limit(limit_mb: float) -> str:
    """Why a record whose line is over the record limit is left out."""
    return f"over {limit_mb:g} million characters (ingest.max_text_mb, the limit on one record)"
