"""Settings: defaults < crag.toml < environment < arguments, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag import ConfigError, Settings


def test_each_layer_overrides_the_one_before(tmp_path: Path) -> None:
    toml = tmp_path / "crag.toml"
    toml.write_text('[grader]\nupper = 0.7\nlower = 0.2\n\n[retriever]\ntop_k = 8\n')
    settings = Settings.load(toml, env={"CRAG_GRADER__LOWER": "0.3"}, retriever={"top_k": 3})
    assert settings.grader.upper == 0.7  # file
    assert settings.grader.lower == 0.3  # environment over file
    assert settings.retriever.top_k == 3  # argument over file
    assert Settings.load(env={}).grader.upper == Settings().grader.upper  # defaults


def test_the_ecosystems_own_variables_configure_the_clients() -> None:
    settings = Settings.load(env={"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "TAVILY_API_KEY": "tv"})
    assert settings.llm.configured and settings.llm.base_url == "http://127.0.0.1:8080/v1"
    assert settings.web_search.api_key.get_secret_value() == "tv"
    assert "sk-x" not in repr(settings)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"grader": {"upper": 0.2, "lower": 0.5}}, "must not exceed"),
        ({"grader": {"kind": "oracle"}}, "grader.kind"),
        ({"retriever": {"depth": 3}}, "retriever.depth"),
        ({"grader": {"upper": 1.5}}, "grader.upper"),
    ],
)
def test_bad_settings_are_named_in_the_error(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.load(env={}, **overrides)


def test_a_broken_config_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "crag.toml"
    bad.write_text("[grader\nupper = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.load(bad, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.load(tmp_path / "missing.toml", env={})
