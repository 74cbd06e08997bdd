"""The registered orchestrator as an MLflow pyfunc: the whole agent loop with its catalog.

`mlflow.pyfunc.load_model("models:/orchestrator@champion").predict(df)` takes a DataFrame with a
`question` column (and optionally `preference`), runs each row through the orchestrator loop
(`toolorchestra.agent.loop.Orchestrator`) with the tools of the catalog the model was trained
with (its system prompt carries the catalog's price sheet, as in training), and returns one row
per question: `answer`, `stop_reason`, `cost_usd`, `latency_s`, `turns`, `format_valid`,
`tool_calls` (JSON) and the full `trajectory` (JSON). Parameters `max_turns`, `max_tokens`,
`temperature` and `budget_usd` (a cost limit per question, enforced by the loop) may be passed at
predict time.

Tools are built in the serving process from the bundled catalog (`bundle.py`); runtime settings
(state folder for caches, MLflow and endpoints) come from the environment (`ORCHESTRA_*`), and
API keys from the variables the catalog names, never from the model.

This module subclasses MLflow's `PythonModel`, so it imports MLflow at module level; only MLflow
(when loading a model) and `registry.store` (when logging one) import it.
"""

from __future__ import annotations

import json
from typing import Any

import mlflow.pyfunc


def signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string", "question"), ColSpec("string", "preference", required=False)]),
        outputs=Schema([ColSpec("string", "answer", required=False), ColSpec("string", "stop_reason"),
                        ColSpec("double", "cost_usd"), ColSpec("double", "latency_s"), ColSpec("long", "turns"),
                        ColSpec("boolean", "format_valid"), ColSpec("string", "tool_calls"),
                        ColSpec("string", "trajectory")]),
        params=ParamSchema([ParamSpec("max_turns", "long", 6), ParamSpec("max_tokens", "long", 192),
                            ParamSpec("temperature", "double", 0.0), ParamSpec("budget_usd", "double", None)]),
    )


def _questions(model_input: Any) -> list[tuple[str, str | None]]:
    import pandas as pd

    if isinstance(model_input, str):
        model_input = [model_input]
    if isinstance(model_input, dict):
        model_input = pd.DataFrame(model_input if isinstance(model_input.get("question"), list) else [model_input])
    if isinstance(model_input, list):
        model_input = pd.DataFrame([{"question": q} if isinstance(q, str) else q for q in model_input])
    if not isinstance(model_input, pd.DataFrame) or "question" not in model_input.columns:
        raise ValueError("input must be a DataFrame (or records) with a `question` column and an optional `preference`")
    out = []
    for _, row in model_input.iterrows():
        preference = row.get("preference") if "preference" in model_input.columns else None
        if preference is not None and (not isinstance(preference, str) or not preference.strip()):
            preference = None
        out.append((str(row["question"]), preference))
    return out


class OrchestratorModel(mlflow.pyfunc.PythonModel):
    """See the module docstring."""

    def load_context(self, context):
        from toolorchestra.core.settings import load_settings
        from toolorchestra.registry.bundle import load_bundle, policy_price
        from toolorchestra.tools.toolbox import build_toolbox

        self.policy, self.catalog, self.manifest = load_bundle(context.artifacts)
        self.price = policy_price(self.catalog, self.manifest)
        from toolorchestra.registry.policy import observation_chars, system_prompt

        self.toolbox = build_toolbox(self.catalog, load_settings(), max_observation_chars=observation_chars(self.manifest))
        self.system_prompt = system_prompt(self.catalog, self.manifest)
        episode = self.manifest.get("episode") or {}
        self.defaults = {"max_turns": int(episode.get("max_turns", 6)),
                         "max_tokens": int(episode.get("max_tokens", 192)), "temperature": 0.0}

    def predict(self, context, model_input, params=None):
        import pandas as pd

        from toolorchestra.agent.loop import Orchestrator

        settings = {**self.defaults, **{k: v for k, v in (params or {}).items() if v is not None}}
        orchestrator = Orchestrator(
            self.policy, self.toolbox, policy_price=self.price, max_turns=int(settings["max_turns"]),
            max_tokens=int(settings["max_tokens"]), temperature=float(settings["temperature"]),
            system_prompt=self.system_prompt,
            budget_usd=float(settings["budget_usd"]) if settings.get("budget_usd") is not None else None,
        )
        trajectories = orchestrator.run_batch(_questions(model_input))
        return pd.DataFrame([{
            "answer": t.answer, "stop_reason": t.stop_reason or "", "cost_usd": float(t.cost_usd),
            "latency_s": float(t.latency_s), "turns": len(t.turns), "format_valid": bool(t.format_valid),
            "tool_calls": json.dumps(t.tool_calls), "trajectory": json.dumps(t.summary(), ensure_ascii=False),
        } for t in trajectories])
