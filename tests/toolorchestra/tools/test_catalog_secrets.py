"""Catalog secrets: `api_key_env` names only variables the user allowed, a key goes only to a host
approved for it, and a registered model's catalog cannot widen either. A loopback server records
every request; a broken JSON Schema in a tool's `parameters` fails when the catalog loads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.chat_server import chat_server

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import load_settings
from toolorchestra.llm.config import OpenAILLMConfig, build_llm
from toolorchestra.registry.bundle import load_bundle
from toolorchestra.tools.catalog import load_catalog, parse_catalog

PLANTED = "AKIA-planted-secret-0123456789"
OPENAI_KEY = "sk-test-key-abcdef"


@pytest.fixture
def recorder() -> Iterator[dict]:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that records headers and bodies."""
    seen: list[dict] = []

    def record(headers: dict, body: bytes) -> str:
        seen.append({"headers": headers, "body": body.decode()})
        return "hi"

    with chat_server(record) as url:
        yield {"url": url, "seen": seen}


@pytest.fixture(autouse=True)
def planted(monkeypatch):
    for key in ("ORCHESTRA_CREDENTIAL_HOSTS", "ORCHESTRA_SETTINGS_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)


def catalog(url: str, env: str) -> dict:
    return {"models": {"expert": {"backend": {"kind": "openai", "model": "m", "base_url": url, "api_key_env": env}}},
            "tools": [{"name": "ask_expert", "kind": "llm", "backend": {"type": "expert", "role": "ask",
                                                                         "models": ["expert"]}}]}


def sent(recorder) -> str:
    return json.dumps(recorder["seen"])


def test_a_catalog_cannot_name_a_variable_the_user_did_not_allow(recorder, tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog(recorder["url"], "AWS_SECRET_ACCESS_KEY")))
    with pytest.raises(ConfigError, match=r"catalog.yaml: models.expert.backend.api_key_env: "
                                          r"'AWS_SECRET_ACCESS_KEY' is not an allowed key variable"):
        load_catalog(path)
    # Built directly (no catalog), the backend refuses too, and nothing is sent.
    with pytest.raises(ConfigError, match="not an allowed key variable"):
        build_llm(OpenAILLMConfig(model="m", base_url=recorder["url"], api_key_env="AWS_SECRET_ACCESS_KEY"),
                  load_settings())
    assert recorder["seen"] == [] and PLANTED not in sent(recorder)


def test_an_allowed_key_goes_only_to_its_approved_host(recorder, monkeypatch):
    config = OpenAILLMConfig(model="m", base_url=recorder["url"], api_key_env="OPENAI_API_KEY", max_attempts=1)
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY may be sent only to api.openai.com, not to '?127.0.0.1"):
        build_llm(config, load_settings())
    assert recorder["seen"] == []
    # The user approves the loopback host: now (and only now) the key arrives there.
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", json.dumps({"OPENAI_API_KEY": ["127.0.0.1"]}))
    llm = build_llm(config, load_settings())
    assert llm.chat([{"role": "user", "content": "hello"}]).text == "hi"
    assert [r["headers"].get("authorization") for r in recorder["seen"]] == [f"Bearer {OPENAI_KEY}"]
    assert PLANTED not in sent(recorder)


def test_host_approval_may_name_a_port(recorder, monkeypatch):
    port = recorder["url"].split(":")[2].split("/")[0]
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", json.dumps({"OPENAI_API_KEY": [f"127.0.0.1:{int(port) + 1}"]}))
    with pytest.raises(ConfigError, match="may be sent only to"):
        build_llm(OpenAILLMConfig(model="m", base_url=recorder["url"], max_attempts=1), load_settings())
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", json.dumps({"OPENAI_API_KEY": [f"127.0.0.1:{port}"]}))
    build_llm(OpenAILLMConfig(model="m", base_url=recorder["url"], max_attempts=1), load_settings()).chat(
        [{"role": "user", "content": "x"}])
    assert len(recorder["seen"]) == 1


def test_a_registered_models_catalog_cannot_widen_the_allow_list(recorder, tmp_path):
    orchestrator = tmp_path / "orchestrator"
    orchestrator.mkdir()
    (orchestrator / "catalog.json").write_text(json.dumps(catalog(recorder["url"], "AWS_SECRET_ACCESS_KEY")))
    (orchestrator / "orchestrator.json").write_text(json.dumps({"name": "o"}))
    with pytest.raises(ConfigError, match="catalog.json: models.expert.backend.api_key_env: 'AWS_SECRET_ACCESS_KEY'"):
        load_bundle({"transformers": str(tmp_path / "weights"), "orchestrator": str(orchestrator)})
    assert recorder["seen"] == []


@pytest.mark.parametrize(("parameters", "where"), [
    ({"type": "objekt"}, "type"),
    ({"type": "object", "properties": {"a": {"type": 5}}}, "properties/a/type"),
    ({"type": "object", "required": "a"}, "required"),
])
def test_an_invalid_json_schema_fails_when_the_catalog_loads(parameters, where):
    data = {"tools": [{"name": "code_interpreter", "kind": "code", "backend": {"type": "code_interpreter"},
                       "parameters": parameters}]}
    with pytest.raises(ConfigError, match=rf"c.yaml: tools.0.parameters: .*not a valid JSON Schema at {where}"):
        parse_catalog(data, source=Path("c.yaml"))


def test_a_password_in_a_base_url_never_reaches_an_error_observation():
    from toolorchestra.llm.base import LLMError
    from toolorchestra.llm.openai_backend import OpenAILLM

    llm = OpenAILLM("m", base_url="http://user:hunter22pw@127.0.0.1:9/v1", max_attempts=1, timeout_s=1)
    with pytest.raises(LLMError) as info:
        llm.chat([{"role": "user", "content": "x"}])
    assert "hunter22pw" not in str(info.value) and "user:***@127.0.0.1:9" in str(info.value)


def test_a_catalog_without_any_price_warns_at_load(caplog):
    data = {"tools": [{"name": "code_interpreter", "kind": "code", "backend": {"type": "code_interpreter"}}]}
    with caplog.at_level("WARNING", logger="toolorchestra.tools.catalog"):
        parse_catalog(data, source=Path("free.yaml"))
    assert "free.yaml: no model or tool has a price; every cost will be reported as $0" in caplog.text
    caplog.clear()
    data["tools"][0]["price"] = {"per_call": 0.001}
    with caplog.at_level("WARNING", logger="toolorchestra.tools.catalog"):
        parse_catalog(data, source=Path("priced.yaml"))
    assert "no model or tool has a price" not in caplog.text
