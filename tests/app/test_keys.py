"""The key ring (crag.app.keys): keys stored hashed with scrypt and written whole
under a lock, a damaged file an error, never "no keys", a key's principal scoped to its
collections, a revoked key refused after a refresh, and scrypt spent only on a token that may
be right and was not verified before."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest
from support.keys import count_scrypts

from crag.app import keys as keyring_module
from crag.app.keys import KeyFileError, KeyRing, create_key, read_keys, revoke_key
from crag.errors import CragError, redact


@pytest.fixture
def scrypts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return count_scrypts(monkeypatch)


def test_a_key_is_stored_hashed_and_its_token_verifies(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, token = create_key(path, "hr-bot", ["hr"])
    assert token.startswith(f"crag_{key.id}_") and len(token) == len("crag_") + 12 + 1 + 43
    text = path.read_text()
    assert token not in text and token.split("_", 2)[2] not in text  # neither the token nor its secret
    stored = json.loads(text)["keys"][0]
    assert stored["kdf"] == {"name": "scrypt", "n": 2**14, "r": 8, "p": 1, "dklen": 32}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (read,) = read_keys(path)
    assert read == key and read.matches(token)
    assert not read.matches(token[:-1] + ("A" if token[-1] != "A" else "B"))
    assert stored["hash"] not in repr(read) and stored["salt"] not in repr(read)


def test_two_creates_at_once_keep_both_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    names = [f"team{i}" for i in range(6)]
    start = threading.Barrier(len(names))
    tokens: dict[str, str] = {}

    def create(name: str) -> None:
        start.wait()
        tokens[name] = create_key(path, name, ["hr"])[1]

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = {k.name: k for k in read_keys(path)}
    assert sorted(kept) == names
    assert all(kept[name].matches(tokens[name]) for name in names)
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []  # no temporary file left


def test_names_and_rights_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    create_key(path, "hr-bot", ["hr"])
    for name, collections, rights in [
        ("hr-bot", ["hr"], ["ask"]),  # taken
        ("legal", ["Legal"], ["ask"]),  # not a collection's name
        ("legal", ["legal"], ["read"]),  # not a right
        ("legal", ["legal"], ["admin"]),  # admin is every collection's
        ("abcdef012345", ["legal"], ["ask"]),  # an id's shape
    ]:
        with pytest.raises(CragError):
            create_key(path, name, collections, rights)
    assert [k.name for k in read_keys(path)] == ["hr-bot"]


@pytest.mark.parametrize("damage", [b"", b"{", b"[]", b'{"format": 1, "keys": [{"id": "x"}]}', b"\xff\xfe"])
def test_a_damaged_file_is_an_error_naming_it_not_no_keys(tmp_path: Path, damage: bytes) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(damage)
    with pytest.raises(KeyFileError, match=str(path)):
        read_keys(path)
    with pytest.raises(KeyFileError, match=str(path)):
        KeyRing(path)  # the server does not start on it
    with pytest.raises(KeyFileError):
        create_key(path, "hr-bot", ["hr"])  # nor is it overwritten
    assert path.read_bytes() == damage


def test_a_tampered_kdf_is_refused_not_run(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    create_key(path, "hr-bot", ["hr"])
    data = json.loads(path.read_text())
    data["keys"][0]["kdf"]["n"] = 2**24  # 16 GiB a verification
    path.write_text(json.dumps(data))
    with pytest.raises(KeyFileError, match="kdf"):
        read_keys(path)


def test_a_key_sees_only_its_collections(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _, hr_token = create_key(path, "hr-bot", ["hr"])
    _, all_token = create_key(path, "ingester", None, ["ask", "ingest"])
    ring = KeyRing(path)
    hr = ring.verify(hr_token)
    assert hr is not None and hr.name == "hr-bot" and hr.key_id is not None
    assert hr.may("ask", "hr") and not hr.sees("legal") and not hr.may("ask", "legal")
    assert not hr.may("ingest", "hr") and not hr.may("admin", "hr")
    every = ring.verify(all_token)
    assert every is not None and every.sees("legal") and every.may("ingest", "legal") and not every.may("admin", "hr")


def test_a_revoked_key_is_refused_after_a_refresh(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, token = create_key(path, "hr-bot", ["hr"])
    _, other = create_key(path, "legal-bot", ["legal"])
    ring = KeyRing(path)
    assert ring.verify(token) is not None and ring.known(key.id)
    assert not ring.refresh()  # nothing changed
    assert revoke_key(path, "hr-bot") == key
    assert ring.refresh()
    assert ring.verify(token) is None and ring.remembered(token) is None and not ring.known(key.id)
    assert ring.verify(other) is not None
    revoke_key(path, read_keys(path)[0].id)  # by id too
    ring.refresh()
    assert len(ring) == 0 and ring.verify(other) is None
    with pytest.raises(KeyFileError, match="No key named 'legal-bot'"):
        revoke_key(path, "legal-bot")


def test_a_file_damaged_while_serving_refuses_every_key_until_mended(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _, token = create_key(path, "hr-bot", ["hr"])
    ring = KeyRing(path)
    assert ring.verify(token) is not None
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    assert ring.refresh() and ring.problem and str(path) in ring.problem
    assert ring.verify(token) is None
    tmp = path.with_name("mended")
    tmp.write_bytes(good)
    os.replace(tmp, path)
    assert ring.refresh() and ring.problem is None and ring.verify(token) is not None


def test_scrypt_runs_once_per_token_and_never_for_a_token_that_cannot_be_right(
    tmp_path: Path, scrypts: list[int]
) -> None:
    path = tmp_path / "keys.json"
    key, token = create_key(path, "hr-bot", ["hr"])
    ring = KeyRing(path)
    scrypts.clear()
    assert ring.verify(token) is not None and len(scrypts) == 1
    for _ in range(3):
        assert ring.verify(token) is not None and ring.remembered(token) is not None
    assert len(scrypts) == 1  # remembered
    garbled = [
        "", "crag", "crag_", "sk-abcdef", token + "x", token[:-1], token.upper(), token.replace("_", "-"),
        f"crag_{'0' * 12}_{token.split('_', 2)[2]}",  # an unknown id
        "crag_" + key.id + "_" + "A" * 4000,  # too long
    ]
    for offered in garbled:
        assert ring.verify(offered) is None
    assert len(scrypts) == 1
    wrong = f"crag_{key.id}_{'A' * 43}"  # a known id, a wrong secret: one scrypt, then remembered as wrong
    for _ in range(3):
        assert ring.verify(wrong) is None
    assert len(scrypts) == 2
    ring.refresh()
    assert len(scrypts) == 2


def test_remembered_tokens_are_kept_as_digests_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys.json"
    key, token = create_key(path, "hr-bot", ["hr"])
    monkeypatch.setattr(keyring_module, "REMEMBERED", 4)
    ring = KeyRing(path)
    assert ring.verify(token) is not None
    for i in range(10):
        ring.verify(f"crag_{key.id}_{str(i) * 43}")
    held = repr(vars(ring))
    assert token not in held and token.split("_", 2)[2] not in held
    assert ring.remembered(token) is not None  # four wrong ones since: in the other map
    assert len(ring._refused) == 4  # the bound (seen from outside, it would take 1024 scrypts)


def test_no_token_or_hash_in_a_log_line_or_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "keys.json"
    _, token = create_key(path, "hr-bot", ["hr"])
    stored = json.loads(path.read_text())["keys"][0]
    ring = KeyRing(path)
    ring.verify(token)
    messages = []
    for damage in (json.dumps({"format": 1, "keys": [{**stored, "rights": ["root"]}]}),
                   json.dumps({"format": 1, "keys": [{**stored, "hash": stored["hash"][:-1] + "z"}]}),
                   path.read_text()[:-3]):
        path.write_text(damage)
        ring.refresh()
        messages.append(ring.problem or "")
        with pytest.raises(KeyFileError) as refused:
            create_key(path, "other", ["hr"])
        messages.append(str(refused.value))
    said = caplog.text + "\n".join(messages)
    assert "damaged" in said
    for secret in (token, token.split("_", 2)[2], stored["hash"], stored["hash"][:-1], stored["salt"]):
        assert secret not in said
    assert token not in redact(f"refused Bearer {token} and ?q={token}")  # key-shaped: redacted anywhere


async def test_requests_at_once_with_a_new_token_cost_one_scrypt(tmp_path: Path, scrypts: list[int]) -> None:
    path = tmp_path / "keys.json"
    key, token = create_key(path, "hr-bot", ["hr"])
    ring = KeyRing(path)
    scrypts.clear()
    found = await asyncio.gather(*(ring.resolve(token) for _ in range(10)))
    assert {p.key_id if p else None for p in found} == {key.id}
    assert len(scrypts) == 1  # one at a time: the others find it verified
    wrong = f"crag_{key.id}_{'A' * 43}"
    assert await asyncio.gather(*(ring.resolve(wrong) for _ in range(10))) == [None] * 10
    assert await ring.resolve("garbled") is None
    assert len(scrypts) == 2
