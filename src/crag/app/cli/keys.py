"""`crag keys create|list|revoke`: the keys `crag serve` accepts, each for some collections and
rights, kept hashed in `[server] keys_file` (default: keys.json in the index folder; see
crag.app.keys). A new key's token is printed once, alone on stdout, and kept nowhere."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from crag.app.cli.common import say, settings_for


def add(sub: Any) -> None:
    p = sub.add_parser("keys", help="keys for crag serve, each for some collections and rights: create, list, revoke")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="a new key; its token is printed once")
    create.add_argument("name", help="the key's name (who holds it), e.g. hr-bot")
    reach = create.add_mutually_exclusive_group(required=True)
    reach.add_argument("--collection", action="append", metavar="NAME", dest="collections",
                       help="a collection the key reaches (repeat for several; 'default' is the index folder's own)")
    reach.add_argument("--all", action="store_true", help="every collection, also those added later")
    create.add_argument("--right", action="append", choices=["ask", "ingest", "admin"],
                        help="what the key may do (repeat for several; default: ask)")
    actions.add_parser("list", help="the keys: id, name, collections, rights, created (never a token)")
    revoke = actions.add_parser("revoke", help="remove a key: a running server refuses it within a second")
    revoke.add_argument("key", metavar="NAME|ID")
    for action in actions.choices.values():
        action.add_argument("--index", type=Path, help="the index folder whose keys.json is meant")
        action.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crag.app.keys import create_key, keys_file, read_keys, revoke_key

    path = keys_file(settings_for(args))
    if args.action == "create":
        key, token = create_key(path, args.name, None if args.all else args.collections, args.right or ["ask"])
        print(token)
        say(f"created key {key.name} (id {key.id}): {_reach(key)}. The token above is shown this once; "
            f"crag keeps only its hash, in {path}. Send it as 'Authorization: Bearer TOKEN'.")
    elif args.action == "revoke":
        key = revoke_key(path, args.key)
        say(f"revoked key {key.name} (id {key.id}); a running crag serve refuses it within a second.")
    else:
        keys = read_keys(path)
        if not keys:
            say(f"no keys in {path}: crag keys create NAME --collection C")
        for key in keys:
            print(f"{key.id}  {key.name}  {_reach(key)}  created {key.created}")
    return 0


def _reach(key: Any) -> str:
    collections = "every collection" if key.collections is None else ", ".join(key.collections)
    return f"{collections}; {', '.join(key.rights)}"
