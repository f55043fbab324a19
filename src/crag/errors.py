"""Errors raised by crag.

Every message says what failed and what to do about it.

    CragError
    ├── ConfigError              a setting or component name is wrong
    ├── QueryError               the question cannot be asked (empty, too long)
    ├── QueryRejected            a query a model wrote (a rewrite, a sub-question) failed the checks
    ├── IndexNotFoundError       no index where one was expected
    │   └── OldIndexFormatError  (crag.index.layout) an earlier crag wrote it: `crag ingest`
    ├── IngestError              a file could not be read or indexed
    │   ├── RecordError          (crag.ingestion.formats.records) one record of a .jsonl/.csv/.tsv
    │   ├── SummaryFailed        (crag.ingestion.batches) the summarizer failed: the whole ingest
    │   └── UnsettledColumns     (crag.ingestion.formats.pdf_tables) a page's table columns kept moving
    ├── GradeParseError          a model's grade could not be parsed
    ├── DecomposeParseError      a model's decomposition of a question could not be parsed
    ├── SearchError              the web search failed
    ├── RerankError              a reranker did not answer, or answered with unusable scores
    ├── StepError                a component failed inside a workflow step, with no fallback
    ├── TraceError               a run trace is missing, unreadable or another workflow's
    ├── ModelReplyError          a language model's server answered with something unusable
    │   └── ReplyCutOff          the reply was cut at its length limit
    ├── BudgetReached            (crag.budget) the question's budget for model calls is spent
    ├── DeadlineReached          (crag.budget) the run's deadline for model calls came
    ├── StoreTimeout             (crag._bounded) a database did not answer in time (a TimeoutError)
    ├── RunRefused               (crag.app.runs) no run was started; `status` is the HTTP status
    ├── BadRequest               (crag.app.server.openai.request) an OpenAI request crag refuses
    └── KeyFileError             (crag.app.keys) the key file is damaged, or a key is unknown

A class drawn with its module in parentheses lives beside the code that raises it; the others
are defined here. `tests/test_errors.py` checks this drawing against every exception class in crag.

`redact(text)` removes API keys from text meant for people (error messages, the trace):
every key crag was given (`register_secret`) and anything shaped like a key or a bearer
token, since a server's error body may echo a key crag never saw.
"""

from __future__ import annotations

import json
import re
import threading
from urllib.parse import unquote_plus


class CragError(Exception):
    """Root of every error crag raises on purpose."""


class ConfigError(CragError):
    """A setting, component name or threshold is invalid."""


class QueryError(CragError):
    """The question is empty or otherwise unusable."""


class IndexNotFoundError(CragError):
    """No index exists at the given path."""

    @classmethod
    def damaged(cls, path: object, problem: str) -> IndexNotFoundError:
        """The index at `path` cannot be used ("is unreadable (...)"), and the one remedy."""
        return cls(f"The index at {path} {problem}; remove the folder and build it again: "
                   f"crag ingest YOUR_DOCS --index {path}")


class IngestError(CragError):
    """A source file could not be read or indexed."""


class GradeParseError(CragError):
    """A language model's relevance grade could not be parsed."""


class DecomposeParseError(CragError):
    """A language model's decomposition of a question could not be parsed."""


class SearchError(CragError):
    """The web search component failed."""


class RerankError(CragError):
    """A reranker did not answer, or its answer did not give every document a usable score."""


class StepError(CragError):
    """A component raised inside a workflow step and nothing could stand in for it."""

    def __init__(self, step: str, cause: BaseException) -> None:
        super().__init__(f"step '{step}' failed: {type(cause).__name__}: {cause}")
        self.step = step


class TraceError(CragError):
    """A run trace file is missing or unreadable, or belongs to another workflow."""


class ModelReplyError(CragError):
    """A language model's server answered, but not with a usable chat completion."""


class ReplyCutOff(ModelReplyError):
    """A model's reply was cut at its length limit (`finish_reason` "length"): not read as a grade or JSON."""


class QueryRejected(CragError):
    """A query the model wrote (a rewrite, a standalone follow-up, a sub-question) failed the sanity checks."""


_secrets: set[str] = set()
_secrets_lock = threading.Lock()
# OpenAI-style (sk-..., sk-proj-...), Tavily (tvly-...) keys, crag's own (crag_<id>_<secret>),
# and bearer tokens.
_KEY_SHAPED = re.compile(
    r"\b(?:sk|tvly|pk|rk)-[A-Za-z0-9_\-]{6,}|crag_[0-9a-f]{12}_[A-Za-z0-9_\-]{20,}"
    r"|(?i:bearer)\s+(?=[\w.~+/\-]*\d)[\w.~+/\-]{8,}=*"
)
REDACTED = "[redacted]"


def register_secret(value: str | None) -> None:
    """Remember an API key so that `redact` removes it wherever it appears."""
    if value and len(value.strip()) >= 6:
        with _secrets_lock:
            _secrets.add(value.strip())


def redact(text: str) -> str:
    """`text` without any registered key or key-shaped token."""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, REDACTED)
    return _KEY_SHAPED.sub(REDACTED, text)


# libpq and asyncpg take a password in the query too (`?password=`), and a client key's.
_PASSWORD_PARAMS = frozenset({"password", "sslpassword"})


def hide_password(url: str) -> str:
    """The URL as it may be shown, its passwords (both forms) registered as secrets, so that
    `redact` removes them from any message that quotes the URL (asyncpg's errors may)."""
    shown, passwords = _without_passwords(url)
    for password in passwords:
        register_secret(password)
        register_secret(unquote_plus(password))
    return shown


def _without_passwords(url: str) -> tuple[str, list[str]]:
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, []
    # The query and fragment first: a password written in the query may hold an "@".
    rest, hash_mark, fragment = rest.partition("#")
    rest, question_mark, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    passwords: list[str] = []
    credentials, at, host = authority.rpartition("@")
    if at and ":" in credentials:
        user, _, password = credentials.partition(":")
        passwords.append(password)
        authority = f"{user}@{host}"
    kept = []
    for param in query.split("&") if question_mark else []:
        name, _, value = param.partition("=")
        if unquote_plus(name).strip().lower() not in _PASSWORD_PARAMS:
            kept.append(param)
        elif value:
            passwords.append(value)
    query = "?" + "&".join(kept) if kept else ""
    return f"{scheme}://{authority}{slash}{path}{query}{hash_mark}{fragment}", passwords


def scrub(exc: BaseException) -> BaseException:
    """Remove keys from `exc`'s message (and body, for HTTP errors) and from the exceptions
    it was raised from, so that neither `str(exc)` nor a printed traceback shows one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = tuple(redact(a) if isinstance(a, str) else a for a in current.args)
        if isinstance(getattr(current, "message", None), str):
            current.message = redact(current.message)  # type: ignore[attr-defined]
        body = getattr(current, "body", None)
        if isinstance(body, (dict, list, str)):
            try:
                current.body = json.loads(redact(json.dumps(body)))  # type: ignore[attr-defined]
            except (TypeError, ValueError, AttributeError):
                pass
        current = current.__cause__ or current.__context__
    return exc
