"""The key ring: keys scoped to collections and rights, kept hashed in one JSON file.

    crag keys create hr-bot --collection hr          # prints crag_<id>_<secret>, once
    crag keys list                                   # ids, names, collections, rights; no secrets
    crag keys revoke hr-bot                          # a running server refuses it within a second

The file (`[server] keys_file`, default `keys.json` in the index folder, mode 0600) holds, per
key, its id, name, collections (None: all), rights, creation time and an scrypt hash of the
whole token with its own salt and parameters; never the token. Each change is written to a
temporary file, fsynced and renamed over the old one under a `filelock` lock, so two
`crag keys` at once never lose a key and a reader never sees half a file. A file that cannot
be read as a key ring is an error naming it, never taken for "no keys".

`KeyRing` is the server's view: it re-reads the file when its stat changes (`refresh`, once a
second), and resolves a token into a `Principal`. scrypt costs tens of milliseconds, so a token
verified once is remembered (by its SHA-256, never the token itself, in a bounded map dropped
at every reload); a token not shaped like a crag token, or naming an unknown id, costs a regex
and a dict lookup, and a wrong secret for a known id is remembered as wrong (bounded too), and
verified by at most one scrypt at a time (`resolve`), so guessing cannot take the CPUs.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app.access import RIGHTS, Principal
from crag.errors import CragError
from crag.index.collections import check_name

if TYPE_CHECKING:
    from crag.config import Settings

__all__ = ["Key", "KeyFileError", "KeyRing", "create_key", "keys_file", "read_keys", "revoke_key"]

_log = logging.getLogger(__name__)

FILE_NAME = "keys.json"
FORMAT = 1
TOKEN = re.compile(r"crag_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")  # token_urlsafe(32): 43 characters
KEY_ID = re.compile(r"[0-9a-f]{12}")
KEY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._@-]{0,63}")
# scrypt as OWASP's cheatsheet gives it (N=2^14, r=8, p=1): 16 MiB and ~40 ms a verification.
SCRYPT = {"name": "scrypt", "n": 2**14, "r": 8, "p": 1, "dklen": 32}
_MAX_MEMORY = 64 * 2**20  # a file naming a larger n or r is damaged, not obeyed
REMEMBERED = 1024  # verified (and refused) tokens kept, each as a SHA-256


class KeyFileError(CragError):
    """The key file is damaged, or a key command cannot be done (a name taken, a key unknown)."""


@dataclass(frozen=True)
class Key:
    """One key as stored: everything but the token, which only its holder has."""

    id: str
    name: str
    collections: tuple[str, ...] | None  # None: every collection
    rights: tuple[str, ...]
    created: str  # ISO 8601, UTC
    kdf: dict[str, Any] = field(repr=False)
    salt: str = field(repr=False)  # hex
    hash: str = field(repr=False)  # hex

    def principal(self) -> Principal:
        collections = None if self.collections is None else frozenset(self.collections)
        return Principal(self.name, collections, frozenset(self.rights), key_id=self.id)

    def matches(self, token: str) -> bool:
        """Whether `token` is this key's (scrypt, then a constant-time compare)."""
        derived = _derive(token, bytes.fromhex(self.salt), self.kdf)
        return hmac.compare_digest(derived, bytes.fromhex(self.hash))


def keys_file(settings: Settings) -> Path:
    """Where the keys are: `[server] keys_file`, or `keys.json` in the index folder."""
    return settings.server.keys_file or settings.index.path / FILE_NAME


def create_key(
    path: Path, name: str, collections: Iterable[str] | None, rights: Iterable[str] = ("ask",)
) -> tuple[Key, str]:
    """Add a key to the file at `path` (created if missing); the key and its token, which
    nothing keeps: show it once. `collections` None: every collection."""
    if not KEY_NAME.fullmatch(name) or KEY_ID.fullmatch(name):
        raise KeyFileError(f"{name!r} cannot name a key: use 1-64 letters, digits, '.', '_', '@' or '-', "
                           "starting with a letter (e.g. hr-bot), and not 12 hex digits (a key's id).")
    rights = tuple(dict.fromkeys(rights))
    if not rights or any(r not in RIGHTS for r in rights):
        raise KeyFileError(f"A key's rights are one or more of {', '.join(RIGHTS)}; not {', '.join(rights)}.")
    if collections is not None:
        collections = tuple(dict.fromkeys(check_name(c) for c in collections))
        if not collections:
            raise KeyFileError("Name the key's collections (--collection NAME, repeated), or give --all.")
        if "admin" in rights:
            raise KeyFileError("The admin right reaches every collection: give --all with --right admin.")
    with _locked(path):
        keys = read_keys(path)
        if any(k.name == name for k in keys):
            raise KeyFileError(f"A key named {name!r} exists in {path}; revoke it first, or choose another name.")
        taken = {k.id for k in keys}
        key_id = secrets.token_hex(6)
        while key_id in taken:
            key_id = secrets.token_hex(6)
        token = f"crag_{key_id}_{secrets.token_urlsafe(32)}"
        salt = secrets.token_bytes(16)
        key = Key(key_id, name, collections, rights, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  dict(SCRYPT), salt.hex(), _derive(token, salt, SCRYPT).hex())
        _write(path, [*keys, key])
    return key, token


def revoke_key(path: Path, name_or_id: str) -> Key:
    """Remove the key with this name or id from the file at `path`; the key removed."""
    with _locked(path):
        keys = read_keys(path)
        found = [k for k in keys if name_or_id in (k.name, k.id)]
        if not found:
            raise KeyFileError(f"No key named {name_or_id!r} (or with that id) in {path}: see crag keys list.")
        _write(path, [k for k in keys if k is not found[0]])
    return found[0]


def read_keys(path: Path) -> list[Key]:
    """The keys in the file at `path`; none when there is no file; `KeyFileError` naming the
    file when it cannot be read as a key ring."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KeyFileError(f"Cannot read the key file {path} ({exc.strerror or exc}).") from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("keys"), list):
            raise ValueError(f"not a crag key file of format {FORMAT}")
        keys = [_key(entry) for entry in data["keys"]]
        if len({k.id for k in keys}) < len(keys) or len({k.name for k in keys}) < len(keys):
            raise ValueError("two keys share an id or a name")
    except (ValueError, TypeError, KeyError, AttributeError, CragError) as exc:  # no value is quoted: no secret
        problem = f"a key lacks {exc}" if isinstance(exc, KeyError) else str(exc)
        raise KeyFileError(
            f"The key file {path} is damaged ({problem}); restore it from a backup, or remove it and "
            "create the keys again (crag keys create)."
        ) from None
    return keys


def _key(entry: dict[str, Any]) -> Key:
    collections = entry["collections"]
    if collections is not None:
        collections = tuple(check_name(c) for c in collections)
    rights = tuple(entry["rights"])
    kdf = dict(entry["kdf"])
    if kdf.keys() != SCRYPT.keys() or kdf["name"] != "scrypt" or not all(
        isinstance(kdf[p], int) and kdf[p] > 0 for p in ("n", "r", "p", "dklen")
    ) or 128 * kdf["n"] * kdf["r"] * kdf["p"] > _MAX_MEMORY or not 16 <= kdf["dklen"] <= 64:
        raise ValueError("a key's kdf is not scrypt with bounded parameters")
    key = Key(entry["id"], entry["name"], collections, rights, str(entry["created"]), kdf,
              bytes.fromhex(entry["salt"]).hex(), bytes.fromhex(entry["hash"]).hex())
    if not KEY_ID.fullmatch(key.id) or not KEY_NAME.fullmatch(key.name) or not rights \
            or any(r not in RIGHTS for r in rights) or len(key.hash) != 2 * kdf["dklen"]:
        raise ValueError("a key's id, name, rights or hash is malformed")
    return key


def _derive(token: str, salt: bytes, kdf: dict[str, Any]) -> bytes:
    return hashlib.scrypt(token.encode(), salt=salt, n=kdf["n"], r=kdf["r"], p=kdf["p"],
                          dklen=kdf["dklen"], maxmem=2 * _MAX_MEMORY)


def _locked(path: Path) -> Any:
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock", timeout=30)


def _write(path: Path, keys: list[Key]) -> None:
    """Replace the file at `path` with `keys`: a temporary file fsynced, renamed over it, the
    folder fsynced; mode 0600 from the start (mkstemp's)."""
    entries = [{"id": k.id, "name": k.name, "collections": None if k.collections is None else list(k.collections),
                "rights": list(k.rights), "created": k.created, "kdf": k.kdf, "salt": k.salt, "hash": k.hash}
               for k in keys]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "keys": entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class KeyRing:
    """The keys of one file as a server sees them (module docstring). `refresh` stats the file
    and blocks: call it off the event loop (`watch` does, once a second)."""

    def __init__(self, path: Path) -> None:
        """Read the file at `path` now: `KeyFileError` if it is damaged (the server does not start)."""
        self.path = path
        self.problem: str | None = None  # why the file last read could not be used (all keys refused)
        self._lock = threading.Lock()
        self._verifying: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None  # per loop
        self._stat = _stat(path)
        self._install(read_keys(path))

    def __len__(self) -> int:
        return len(self._keys)

    def refresh(self) -> bool:
        """Re-read the file if it changed since (inode, size, mtime); whether it was re-read. A
        damaged file refuses every key (logged once, with `problem`) until it is mended."""
        stat = _stat(self.path)  # before reading: a change while reading is seen next time
        if stat == self._stat:
            return False
        try:
            keys, problem = read_keys(self.path), None
        except KeyFileError as exc:
            keys, problem = [], str(exc)
            _log.error("%s; every key of it is refused until it is mended", exc)
        self._stat, self.problem = stat, problem
        self._install(keys)
        return True

    async def watch(self, every: float = 1.0) -> None:
        """`refresh` every `every` seconds, off the event loop, until cancelled."""
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.refresh)

    def remembered(self, token: str) -> Principal | None:
        """The principal of `token` if it was verified since the last reload; no scrypt."""
        entry = self._verified.get(_digest(token))
        key = self._keys.get(entry) if entry is not None else None
        return key.principal() if key is not None else None

    def known(self, key_id: str) -> bool:
        """Whether a key with this id is in the ring (False once it is revoked and refreshed)."""
        return key_id in self._keys

    def verify(self, token: str) -> Principal | None:
        """The principal of `token`, or None: scrypt once for a token of a known id not seen
        before (blocking, ~40 ms), nothing for any other."""
        found = TOKEN.fullmatch(token)
        with self._lock:  # one reload's maps, not two
            keys, verified, refused = self._keys, self._verified, self._refused
        key = keys.get(found[1]) if found else None
        if key is None:
            return None
        digest = _digest(token)
        with self._lock:
            if verified.get(digest) == key.id:
                verified.move_to_end(digest)
                return key.principal()
            if digest in refused:
                return None
        matches = key.matches(token)
        with self._lock:
            remembered = verified if matches else refused
            remembered[digest] = key.id
            while len(remembered) > REMEMBERED:
                remembered.popitem(last=False)
        return key.principal() if matches else None

    async def resolve(self, token: str) -> Principal | None:
        """`verify` for the event loop: no scrypt for a token remembered or ill-formed, else
        one scrypt at a time, in a thread."""
        principal = self.remembered(token)
        if principal is not None or not self._might_verify(token):
            return principal
        loop = asyncio.get_running_loop()
        if self._verifying is None or self._verifying[0] is not loop:
            self._verifying = (loop, asyncio.Semaphore(1))  # waiting here, not in a thread of the pool
        async with self._verifying[1]:
            return await asyncio.to_thread(self.verify, token)

    def _might_verify(self, token: str) -> bool:
        found = TOKEN.fullmatch(token)
        return found is not None and found[1] in self._keys and _digest(token) not in self._refused

    def _install(self, keys: list[Key]) -> None:
        # New maps, swapped in whole: a verification under way on the old ones can only fill those.
        with self._lock:
            self._keys = {k.id: k for k in keys}
            self._verified: OrderedDict[bytes, str] = OrderedDict()
            self._refused: OrderedDict[bytes, str] = OrderedDict()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _stat(path: Path) -> tuple[int, int, int] | None:
    """The file's identity and version; None when there is none; (-1, -1, -1) when it cannot be
    told (reading it will then say why, and refuse every key)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return -1, -1, -1
    return st.st_ino, st.st_size, st.st_mtime_ns
