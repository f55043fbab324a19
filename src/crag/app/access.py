"""Who is asking, and what they may see: the one place `crag serve` decides access.

A request's key becomes a `Principal` once, at the door (`crag.app.server.ops.auth`), and is
carried in the request's scope (`principal_of`). Everything that reads or starts a stored thing
(a run, its record, trace and events, `/handlers`, `/files`, the live page's runs, MCP
`search`/`ask`, the OpenAI door's models) asks `may(principal, collection, right)` here, with the
collection the thing belongs to. A thing the principal may not see answers exactly as a thing
that does not exist (404), so that listing, guessing or replaying ids tells nothing.

Rights:
    ask     ask questions of its collections, and read their runs, traces and files
    ingest  add documents to its collections (MCP `ingest`); implies nothing else
    admin   everything, in every collection (the server's own `[server] api_key` is admin)
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

Right = Literal["ask", "ingest", "admin"]
RIGHTS: tuple[Right, ...] = ("ask", "ingest", "admin")
SCOPE_KEY = "crag.principal"  # where the door leaves the request's principal, in the ASGI scope


@dataclass(frozen=True)
class Principal:
    """A caller: the key's name, the collections it may reach (None: all) and its rights."""

    name: str
    collections: frozenset[str] | None
    rights: frozenset[str]
    key_id: str | None = None  # None: the server's own key, or no key at all

    def sees(self, collection: str) -> bool:
        """Whether anything of `collection` may be shown to this caller."""
        return "admin" in self.rights or self.collections is None or collection in self.collections

    def may(self, right: Right, collection: str) -> bool:
        """Whether this caller may do `right` in `collection`."""
        if "admin" in self.rights:
            return True
        return right in self.rights and self.sees(collection)

    def visible(self, collections: Iterable[str]) -> list[str]:
        """Those of `collections` this caller may ask, in their order."""
        return [c for c in collections if self.may("ask", c)]


# No key configured: the server answers loopback only (ops/guard.py), to the machine's own user.
LOCAL = Principal("local", None, frozenset(RIGHTS))
ADMIN = Principal("admin", None, frozenset(RIGHTS))  # the server's own [server] api_key
NOBODY = Principal("nobody", frozenset(), frozenset())  # no door said who: sees nothing (fails closed)


def may(principal: Principal, collection: str, right: Right = "ask") -> bool:
    """The one check: may `principal` do `right` in `collection`? (Module docstring.)"""
    return principal.may(right, collection)


def principal_of(scope: MutableMapping[str, Any]) -> Principal:
    """The principal the door left in `scope` (a Starlette `request.scope`): `LOCAL` on a server
    with no keys (which the guard limits to this machine); `NOBODY`, who sees nothing, where no
    door said, so that a route mounted outside the doors fails closed."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, Principal) else NOBODY


def set_principal(scope: MutableMapping[str, Any], principal: Principal) -> None:
    scope[SCOPE_KEY] = principal
