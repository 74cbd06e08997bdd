"""The registered versions a server answers with, chosen by a request's `model` field.

`model` may be empty or the registered name (the server's `--model`), `NAME@ALIAS`, `NAME/VERSION`,
a bare alias or version of the server's model, or a full `models:/...` reference; only versions of
the served registered model are loaded (at most `max_models` at once, least recently used
dropped), so a request cannot make the server load arbitrary models. Aliases are resolved when a
version is first loaded: restart the server to follow a moved alias.

A `ServedModel` is what a request runs against: the policy, the toolbox of the catalog it was
trained with, its training system prompt (with the price sheet, as the pyfunc uses), default
limits from its manifest, the calibrated default preference (`calibration` tags, set by
`orchestra calibrate`) and its own `Batcher`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.agent.loop import Episode, Orchestrator
from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.settings import Settings
from toolorchestra.llm.config import LocalEngine, as_engine, catalog_llms, pick_engine
from toolorchestra.registry.policy import RegisteredModel, load_registered
from toolorchestra.registry.store import parse_ref
from toolorchestra.serving.batcher import Batcher
from toolorchestra.serving.config import ServeConfig
from toolorchestra.tools.toolbox import Toolbox, build_toolbox

CALIBRATED_COST_WEIGHT = "orchestra.calibration.cost_weight"
"""Version tag `orchestra calibrate` writes: the default preference weight on cost when serving."""


class UnknownModel(OrchestraError):
    """The request's `model` names nothing this server may serve."""


@dataclass
class ServedModel:
    registered: RegisteredModel
    toolbox: Toolbox
    system_prompt: str
    max_turns: int
    max_tokens: int
    batcher: Batcher | None = None
    default_vector: dict[str, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.registered.name}/{self.registered.version}"

    @property
    def tool_names(self) -> list[str]:
        return list(self.toolbox.tools)

    @property
    def model_names(self) -> list[str]:
        """Expert model aliases the served tools ask (the `models/<alias>` preference keys)."""
        return sorted({a for t in self.toolbox.tools.values() for a in getattr(t, "llms", {})})

    def orchestrator(self, *, max_tokens: int | None = None, temperature: float = 0.0) -> Orchestrator:
        return Orchestrator(self.registered.llm, self.toolbox, policy_price=self.registered.price,
                            max_turns=self.max_turns, max_tokens=max_tokens or self.max_tokens,
                            temperature=temperature, system_prompt=self.system_prompt)

    def run_batch(self, episodes: list[Episode], max_tokens: int, temperature: float) -> None:
        self.orchestrator(max_tokens=max_tokens, temperature=temperature).run_episodes(episodes)


def calibrated_vector(tags: dict[str, str]) -> dict[str, float]:
    raw = tags.get(CALIBRATED_COST_WEIGHT)
    try:
        weight = float(raw) if raw is not None else 0.0
    except ValueError:
        return {}
    return {"cost": weight} if weight > 0 else {}


def served_from(registered: RegisteredModel, settings: Settings, *, engine: LocalEngine | None = None) -> ServedModel:
    """A registered version ready to serve; `engine` runs its policy and the catalog's local experts
    there (None: as loaded and as the catalog says)."""
    from toolorchestra.registry.policy import observation_chars, system_prompt

    episode = registered.manifest.get("episode") or {}
    if engine is not None:
        registered = dataclasses.replace(registered, llm=as_engine(registered.llm, engine, settings))
    return ServedModel(
        registered=registered,
        toolbox=build_toolbox(registered.catalog, settings, max_observation_chars=observation_chars(registered.manifest),
                              llm_for=catalog_llms(registered.catalog.models, engine, settings)),
        system_prompt=system_prompt(registered.catalog, registered.manifest),
        max_turns=int(episode.get("max_turns", 6)), max_tokens=int(episode.get("max_tokens", 192)),
        default_vector=calibrated_vector(registered.tags),
    )


class ModelPool:
    """Loaded versions by request `model` field (see the module docstring)."""

    def __init__(self, config: ServeConfig, settings: Settings, *,
                 loader: Callable[[str], ServedModel] | None = None,
                 on_batch: Callable[[int, float], None] | None = None) -> None:
        self.config, self.settings = config, settings
        self.name, self.alias, self.version = parse_ref(config.model)
        engine = pick_engine(config.engine) if loader is None else None
        self._loader = loader or (lambda ref: served_from(load_registered(ref, settings, engine=engine), settings, engine=engine))
        self._on_batch = on_batch
        self._loaded: OrderedDict[str, ServedModel] = OrderedDict()
        self._refs: dict[str, str] = {}  # reference -> loaded version id
        self._lock = threading.Lock()

    def reference(self, requested: str) -> str:
        """The `models:/` reference a request's `model` field means."""
        text = (requested or "").strip()
        if text in ("", self.name, self.config.model):
            return self.config.model
        if text.startswith("models:/"):
            ref = text
        elif "@" in text or "/" in text:
            ref = f"models:/{text}"
        elif text.isdigit():
            ref = f"models:/{self.name}/{text}"
        else:
            ref = f"models:/{self.name}@{text}"
        try:
            name, _, _ = parse_ref(ref)
        except OrchestraError as exc:
            raise UnknownModel(str(exc)) from None
        if name != self.name:
            raise UnknownModel(f"model {requested!r}: this server serves versions of {self.name!r} only")
        return ref

    def get(self, requested: str) -> ServedModel:
        ref = self.reference(requested)
        with self._lock:  # loading is rare; one at a time keeps memory bounded
            loaded_id = self._refs.get(ref)
            if loaded_id in self._loaded:
                self._loaded.move_to_end(loaded_id)
                return self._loaded[loaded_id]
            try:
                served = self._loader(ref)
            except OrchestraError as exc:
                raise UnknownModel(str(exc)) from None
            if served.id in self._loaded:
                served = self._loaded[served.id]
            else:
                served.batcher = Batcher(served.run_batch, max_batch=self.config.max_batch,
                                         window_s=self.config.batch_window_ms / 1000,
                                         max_queue=self.config.max_queue, on_batch=self._on_batch,
                                         name=f"batcher-{served.id}")
                self._loaded[served.id] = served
                while len(self._loaded) > self.config.max_models:
                    _, dropped = self._loaded.popitem(last=False)
                    self._refs = {r: v for r, v in self._refs.items() if v != dropped.id}
                    if dropped.batcher is not None:
                        dropped.batcher.close()
            self._refs[ref] = served.id
            return served

    def loaded(self) -> list[ServedModel]:
        with self._lock:
            return list(self._loaded.values())

    def close(self) -> None:
        for served in self.loaded():
            if served.batcher is not None:
                served.batcher.close()

    def info(self) -> list[dict[str, Any]]:
        return [{"id": s.id, "aliases": s.registered.aliases, "run_id": s.registered.run_id} for s in self.loaded()]
