"""`crag keys create|list|revoke` (crag.app.cli.keys): the token printed once, alone on stdout,
and never again; list shows names, collections and rights; revoke by name or id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.app.cli import main
from crag.app.keys import TOKEN, KeyRing


def crag(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = str(tmp_path / "index")
    status, out, err = crag(capsys, "keys", "create", "hr-bot", "--collection", "hr", "--index", index)
    assert status == 0 and TOKEN.fullmatch(out.strip())  # the token alone: TOKEN=$(crag keys create ...)
    token = out.strip()
    assert "hr-bot" in err and "shown this once" in err and token not in err
    status, out, _ = crag(capsys, "keys", "create", "everything", "--all", "--right", "ask", "--right", "admin",
                          "--index", index)
    assert status == 0
    admin_token = out.strip()

    status, listed, err = crag(capsys, "keys", "list", "--index", index)
    assert status == 0 and len(listed.splitlines()) == 2
    stored = json.loads((tmp_path / "index" / "keys.json").read_text())["keys"]
    assert "hr-bot  hr; ask" in listed and "everything  every collection; ask, admin" in listed
    for secret in (token, admin_token, *(k["hash"] for k in stored), *(k["salt"] for k in stored)):
        assert secret not in listed + err
    key_id = stored[0]["id"]
    assert KeyRing(tmp_path / "index" / "keys.json").verify(token) is not None

    status, _, err = crag(capsys, "keys", "create", "hr-bot", "--collection", "legal", "--index", index)
    assert status == 2 and "exists" in err
    status, _, err = crag(capsys, "keys", "revoke", key_id, "--index", index)  # by id
    assert status == 0 and "revoked key hr-bot" in err
    status, _, err = crag(capsys, "keys", "revoke", "hr-bot", "--index", index)
    assert status == 2 and "No key named 'hr-bot'" in err
    status, listed, _ = crag(capsys, "keys", "list", "--index", index)
    assert "hr-bot" not in listed and "everything" in listed
    assert KeyRing(tmp_path / "index" / "keys.json").verify(token) is None


def test_a_key_names_its_reach(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = str(tmp_path / "index")
    with pytest.raises(SystemExit):  # neither --collection nor --all
        main(["keys", "create", "hr-bot", "--index", index])
    with pytest.raises(SystemExit):  # both
        main(["keys", "create", "hr-bot", "--collection", "hr", "--all", "--index", index])
    capsys.readouterr()
    status, _, err = crag(capsys, "keys", "create", "hr-bot", "--collection", "hr", "--right", "admin", "--index", index)
    assert status == 2 and "--all" in err
    status, out, err = crag(capsys, "keys", "list", "--index", index)
    assert status == 0 and out == "" and "no keys" in err


def test_the_keys_file_setting_moves_the_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "secrets" / "crag-keys.json"
    monkeypatch.setenv("CRAG_SERVER__KEYS_FILE", str(elsewhere))
    status, _, _ = crag(capsys, "keys", "create", "hr-bot", "--collection", "hr", "--index", str(tmp_path / "index"))
    assert status == 0 and elsewhere.exists() and not (tmp_path / "index" / "keys.json").exists()
