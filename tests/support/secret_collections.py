"""An index folder serving two collections, each holding a secret the other's key must never
see: the default collection (the sample handbook and a vault note) and "hr" (a salary note).

    root = secret_collections(tmp / "index")
    hr_token = key_for(settings, "hr-bot", ["hr"])   # a key of the ring that asks "hr" only
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crag import Settings, ingest
from crag.app.keys import create_key, keys_file
from crag.index.collections import collection_path
from support.paths import SAMPLES

# Each secret's marker is a word found in no other document, so that any answer, chunk, trace
# or listing carrying it shows text that crossed from one collection to the other.
DEFAULT_SECRET = "ORCHID-4471"
HR_SECRET = "PELICAN-8820"
DEFAULT_QUESTION = "What is the vault code of the Lumen operations team?"
HR_QUESTION = "What is the salary of Alice Example?"
DEFAULT_FILE = "vault.md"
HR_FILE = "salaries.md"


def secret_collections(root: Path) -> Path:
    """Ingest both collections under the index folder `root`; returns `root`."""
    docs = root.parent / "secret-docs"
    (docs / "default").mkdir(parents=True)
    (docs / "hr").mkdir(parents=True)
    (docs / "default" / DEFAULT_FILE).write_text(
        f"# Vault\n\nThe vault code of the Lumen operations team is {DEFAULT_SECRET}; it opens the "
        "server room's vault and is changed every spring.\n"
    )
    (docs / "hr" / HR_FILE).write_text(
        f"# Salaries\n\nThe salary of Alice Example is 91,337 zorkmids a year, under the codeword "
        f"{HR_SECRET}; it is reviewed every March by the HR committee.\n"
    )
    ingest([SAMPLES / "docs", docs / "default"], root)
    ingest([docs / "hr"], collection_path(root, "hr"))
    return root


def secret_settings(tmp: Path) -> Settings:
    """Both collections ingested under `tmp / "index"`, and offline settings serving them, with
    the sample 'web' and a SQLite run store in `tmp`."""
    root = secret_collections(tmp / "index")
    return Settings.load(env={}, index={"path": root}, web_search={"corpus": SAMPLES / "web.jsonl"},
                         server={"store": str(tmp / "server.db")})


def key_for(settings: Settings, name: str, collections: Iterable[str] | None, rights: Iterable[str] = ("ask",)) -> str:
    """A new key of the ring `settings` name (`crag keys create`); its token."""
    return create_key(keys_file(settings), name, collections, rights)[1]
