"""Question and passage files for evaluation, and the removal of gold passages.

The format is that of the shared QA files: questions are JSON Lines with `id`,
`question`, `answers` (every gold string) and `doc_id` (the gold passage); passages are
JSON Lines with `doc_id`, `title` and `text`, the format `crag ingest` reads. A multi-hop
question may also list `support_doc_ids`, every passage its answer draws on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crag.errors import ConfigError, IngestError


@dataclass(frozen=True)
class Question:
    """One labelled question: its gold answers and the passage that answers it.

    `support_doc_ids` are every passage the answer draws on (two for a multi-hop
    question), always led by `doc_id`, the gold passage that `--drop-gold` removes.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    doc_id: str
    support_doc_ids: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        # The gold passage supports its question even when the file leaves it out.
        support = tuple(dict.fromkeys((self.doc_id, *self.support_doc_ids)))
        object.__setattr__(self, "support_doc_ids", support)

    @property
    def multi_hop(self) -> bool:
        """True when passages beside the gold one support the answer."""
        return self.support_doc_ids != (self.doc_id,)


@dataclass(frozen=True)
class Passage:
    """One passage of a corpus."""

    doc_id: str
    title: str
    text: str


def _records(path: Path) -> Iterable[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a JSON Lines file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IngestError(f"{path} does not exist.") from None
    except OSError as exc:
        raise IngestError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise IngestError(f"{path} is not UTF-8 text.") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{number}: not valid JSON ({exc.msg}).") from None
        if not isinstance(record, dict):
            raise IngestError(
                f"{path}:{number}: expected a JSON object, got {type(record).__name__}."
            )
        yield number, record


def load_questions(path: str | Path) -> list[Question]:
    """Read a question file; every line needs `id`, `question`, `answers` and `doc_id`,
    and may have `support_doc_ids` (a list of doc ids).

    Raises:
        IngestError: the file is missing, unreadable, empty, or a line lacks a field.
    """
    path = Path(path)
    questions: list[Question] = []
    seen: set[str] = set()
    for number, record in _records(path):
        missing = [k for k in ("id", "question", "answers", "doc_id") if not record.get(k)]
        if missing:
            raise IngestError(f"{path}:{number}: a question needs {', '.join(missing)}.")
        answers = record["answers"]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise IngestError(f"{path}:{number}: 'answers' must be a list of strings.")
        support = record.get("support_doc_ids", [])
        if not isinstance(support, list) or not all(isinstance(d, str) for d in support):
            raise IngestError(f"{path}:{number}: 'support_doc_ids' must be a list of strings.")
        qid = str(record["id"])
        if qid in seen:
            raise IngestError(f"{path}:{number}: question id {qid!r} appears twice.")
        seen.add(qid)
        questions.append(
            Question(
                qid,
                str(record["question"]),
                tuple(answers),
                str(record["doc_id"]),
                tuple(support),
            )
        )
    if not questions:
        raise IngestError(f"{path} holds no questions.")
    return questions


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a passage file; every line needs `doc_id` and `text` (`title` is optional).

    Raises:
        IngestError: the file is missing, unreadable, empty, or a line lacks a field.
    """
    path = Path(path)
    passages: list[Passage] = []
    seen: set[str] = set()
    for number, record in _records(path):
        if not record.get("doc_id") or "text" not in record:
            raise IngestError(f"{path}:{number}: a passage needs 'doc_id' and 'text'.")
        doc_id = str(record["doc_id"])
        if doc_id in seen:
            raise IngestError(f"{path}:{number}: doc_id {doc_id!r} appears twice.")
        seen.add(doc_id)
        passages.append(Passage(doc_id, str(record.get("title") or doc_id), str(record["text"])))
    if not passages:
        raise IngestError(f"{path} holds no passages.")
    return passages


def union_corpus(paths: Iterable[str | Path]) -> list[Passage]:
    """The passages of several corpus files, each doc_id once: the first file that has it wins.

    Raises:
        IngestError: a file is missing, unreadable, empty, or a line lacks a field.
    """
    union: dict[str, Passage] = {}
    for path in paths:
        for passage in load_corpus(path):
            union.setdefault(passage.doc_id, passage)
    return list(union.values())


def check_gold_in_corpus(questions: Sequence[Question], passages: Sequence[Passage]) -> None:
    """Every question's gold passage must be in the corpus, or its metrics mean nothing.

    Raises:
        IngestError: naming the questions whose gold passage is missing.
    """
    ids = {p.doc_id for p in passages}
    missing = [q for q in questions if q.doc_id not in ids]
    if missing:
        shown = ", ".join(f"{q.id} ({q.doc_id})" for q in missing[:3])
        raise IngestError(
            f"{len(missing)} question(s) have a gold passage that is not in the corpus, e.g. {shown}; "
            "pass the corpus that belongs to this question file."
        )


@dataclass(frozen=True)
class GoldDrop:
    """Which questions were chosen, and which passages leave the index for them."""

    questions: frozenset[str]
    doc_ids: frozenset[str]

    def is_dropped(self, question: Question) -> bool:
        """True when the question's gold passage is not in the index.

        This is true for every chosen question, and also for one that shares its gold
        passage with a chosen question (the passage is gone for both).
        """
        return question.doc_id in self.doc_ids


def drop_gold(questions: Sequence[Question], fraction: float, seed: int = 0) -> GoldDrop:
    """Choose `round(fraction * len(questions))` questions at random and drop their gold passages.

    The choice depends only on the question ids, `fraction` and `seed`, not on the file's
    line order, so the same arguments drop the same passages on every machine.

    Raises:
        ConfigError: `fraction` is outside [0, 1].
    """
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"--drop-gold must be a fraction between 0 and 1, not {fraction}.")
    ids = sorted(q.id for q in questions)
    chosen = frozenset(random.Random(seed).sample(ids, round(fraction * len(ids))))
    return GoldDrop(chosen, frozenset(q.doc_id for q in questions if q.id in chosen))


def write_corpus(
    passages: Iterable[Passage], path: str | Path, *, exclude: Iterable[str] = ()
) -> int:
    """Write passages as JSON Lines, leaving out the `exclude` doc ids; returns how many were written."""
    left_out = set(exclude)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for p in passages:
            if p.doc_id in left_out:
                continue
            f.write(
                json.dumps(
                    {"doc_id": p.doc_id, "title": p.title, "text": p.text}, ensure_ascii=False
                )
                + "\n"
            )
            written += 1
    return written
