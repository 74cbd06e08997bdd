"""Use a registered orchestrator as a policy: `orchestra ask --policy models:/orchestrator@champion`
and the `evaluate` stage's champion and `--model` runs.

`load_registered(ref, settings)` downloads the version once (`store.download`), loads its weights
from the bundled transformers model and its catalog and manifest (`bundle.load_bundle`), and
returns them with the version's provenance; `load_policy(ref, settings)` returns what a caller of
the agent loop needs: `(LLM, Price of its tokens, Catalog it was trained with)`.
`load_candidate` and `champion_to_compare` are what the `evaluate` stage compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM
from toolorchestra.tools.catalog import Catalog, Price

if TYPE_CHECKING:
    from toolorchestra.llm.config import LocalEngine


@dataclass
class RegisteredModel:
    llm: LLM
    catalog: Catalog
    manifest: dict[str, Any]
    price: Price
    name: str
    version: str
    run_id: str | None
    aliases: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def policy_alias(self) -> str | None:
        return self.manifest.get("policy_alias") or self.catalog.policy

    @property
    def ref(self) -> str:
        return f"models:/{self.name}/{self.version}"


def load_registered(ref: str, settings: Settings, *, device: str = "auto",
                    engine: LocalEngine | None = None) -> RegisteredModel:
    """The registered version `ref`, its policy on `engine` (None: transformers on `device`;
    "llamacpp": its GGUF, converted once and cached under the settings' models cache)."""
    from toolorchestra.registry.bundle import load_bundle, policy_price
    from toolorchestra.registry.store import artifact_paths, download

    folder, version = download(ref, settings)
    llm, catalog, manifest = load_bundle(artifact_paths(folder), device=device, engine=engine,
                                         cache_root=settings.models_cache)
    llm.model = f"{version.name}/v{version.version}"
    return RegisteredModel(llm=llm, catalog=catalog, manifest=manifest, price=policy_price(catalog, manifest),
                           name=version.name, version=str(version.version), run_id=version.run_id,
                           aliases=list(version.aliases or []), tags=dict(version.tags or {}))


def load_policy(ref: str, settings: Settings) -> tuple[LLM, Price, Catalog]:
    """(policy LLM, price of its tokens, the catalog it was trained with) of a registered model."""
    model = load_registered(ref, settings)
    return model.llm, model.price, model.catalog


def observation_chars(manifest: dict[str, Any]) -> int:
    """The tool-observation length the policy was trained with (its manifest's episode): a
    lookup's search results cut elsewhere show the small model passages it never learnt to skip."""
    from toolorchestra.tools.toolbox import MAX_OBSERVATION_CHARS

    value = (manifest.get("episode") or {}).get("max_observation_chars")
    return int(value) if isinstance(value, int) and value > 0 else MAX_OBSERVATION_CHARS


def system_prompt(catalog: Catalog, manifest: dict[str, Any], tools: list[str] | None = None) -> str:
    """The system prompt a policy was trained with: the loop's system prompt (the manifest's) and the
    price sheet of the offered tools (`tools`, default every catalog tool) at catalog prices, as
    `preferences.assemble` renders it for every training instance. `orchestra ask`, the server and
    the pyfunc all use it: without the price sheet, `ask` showed the champion a prompt it had
    never seen, and it sent "What is 17 * 23?" to local_search."""
    from toolorchestra.agent.loop import SYSTEM_PROMPT
    from toolorchestra.preferences.assemble import price_sheet

    base = manifest.get("system_prompt") or SYSTEM_PROMPT
    wanted = None if tools is None else set(tools)
    offered = [t.name for t in catalog.tools if wanted is None or t.name in wanted]
    if not offered:
        return base
    sheet = price_sheet(catalog, offered, catalog.tool_prices(), catalog.model_prices())
    return f"{base}\n\n{sheet}"


def is_registry_ref(text: str | None) -> bool:
    return bool(text) and str(text).startswith("models:/")


@dataclass
class Candidate:
    """The orchestrator under evaluation: a checkpoint folder or a registered version."""

    llm: LLM
    catalog: Catalog
    manifest: dict[str, Any]
    ref: str
    sha: str | None
    version: str | None = None


def load_candidate(ref: str | None, default_folder: Path, workspace: Path, settings: Settings, *,
                   device: str = "auto") -> Candidate:
    """`ref` (a registry reference or a folder, relative to the workspace) or else `default_folder`."""
    from toolorchestra.registry.bundle import weights_sha256

    if is_registry_ref(ref):
        model = load_registered(str(ref), settings, device=device)
        return Candidate(llm=model.llm, catalog=model.catalog, manifest=model.manifest, ref=model.ref,
                         sha=model.manifest.get("weights_sha256"), version=model.version)
    from toolorchestra.rl.checkpoint import load_orchestrator

    folder = Path(ref).expanduser() if ref is not None else default_folder
    if not folder.is_absolute():
        folder = workspace / folder
    llm, catalog, manifest = load_orchestrator(folder, device=device)
    llm.model = "trained"
    return Candidate(llm=llm, catalog=catalog, manifest=manifest, ref=str(folder), sha=weights_sha256(folder))


def champion_to_compare(registered_model: str, candidate_sha: str | None, settings: Settings, *,
                        device: str = "auto") -> tuple[RegisteredModel | None, str]:
    """(the registry's champion, or None and why it is not evaluated beside the candidate)."""
    from toolorchestra.registry.store import CHAMPION, alias_version, client_for

    version = alias_version(client_for(settings), registered_model, CHAMPION)
    if version is None:
        return None, f"no champion of {registered_model!r} in the registry yet"
    if candidate_sha and version.tags.get("orchestra.weights_sha256") == candidate_sha:
        return None, f"the champion (version {version.version}) has the candidate's weights"
    return load_registered(f"models:/{registered_model}/{version.version}", settings, device=device), ""
