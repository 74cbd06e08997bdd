"""`orchestra ask`: run the orchestrator on one question and show its trajectory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orchestra_cli.app import ENGINE_HELP, Engine, app


def resolve_policy(catalog, policy: str | None, settings, engine=None):
    """The policy LLM and its price: a catalog alias, or a transformers model folder; its local
    model on `engine` (None: as the catalog says, transformers for a folder)."""
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.llm.config import LocalLLMConfig, build_llm, on_engine
    from toolorchestra.tools.catalog import Price

    name = policy or catalog.policy
    if name is None:
        raise ConfigError(None, "no policy given and the catalog names none: pass --policy ALIAS|FOLDER")
    if name in catalog.models:
        entry = catalog.models[name]
        return build_llm(on_engine(entry.backend, engine), settings), entry.price
    folder = Path(name).expanduser()
    if folder.is_dir():
        default_price = catalog.models[catalog.policy].price if catalog.policy else Price()
        return build_llm(on_engine(LocalLLMConfig(model=str(folder.resolve())), engine), settings), default_price
    raise ConfigError(
        None, f"--policy {name!r} is neither a catalog model alias ({', '.join(sorted(catalog.models))}) "
        "nor a model folder", key="policy",
    )


def _trace(trajectory, settings, policy: str | None) -> str | None:
    """The trajectory as an MLflow trace in the experiment `orchestra-ask` (None if it could not be logged)."""
    from toolorchestra.registry.store import client_for
    from toolorchestra.tracing.trajectory import experiment_id_for, log_trajectory_trace

    try:
        client_for(settings)
        experiment = experiment_id_for("orchestra-ask")
    except Exception:
        return None
    return log_trajectory_trace(trajectory, name="ask", experiment_id=experiment,
                                tags={"orchestra.policy": str(policy or trajectory.policy)})


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the task or question")],
    catalog: Annotated[Path | None, typer.Option(help="tool catalog YAML (default: the embedded one)")] = None,
    policy: Annotated[str | None, typer.Option(help="orchestrator: a catalog alias, a model folder, or models:/NAME@ALIAS")] = None,
    preference: Annotated[str | None, typer.Option(help="user preference, appended to the task")] = None,
    max_turns: Annotated[int, typer.Option(min=1, max=100)] = 6,
    max_tokens: Annotated[int, typer.Option(min=1, help="tokens per orchestrator turn")] = 192,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.0,
    tools: Annotated[str | None, typer.Option(help="comma-separated subset of the catalog's tools")] = None,
    budget: Annotated[float | None, typer.Option(min=0.0, help="cost limit in USD: the loop stops before a call that could exceed it")] = None,
    domain: Annotated[Path | None, typer.Option(
        help="a domain folder (db.json): local search keeps to its records and the code interpreter holds them")] = None,
    trace: Annotated[bool, typer.Option(help="log the trajectory as an MLflow trace (experiment orchestra-ask)")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    engine: Annotated[Engine, typer.Option(help=ENGINE_HELP)] = Engine.auto,
) -> None:
    """Run the orchestrator on QUESTION and print its trajectory."""
    from toolorchestra.agent.loop import Orchestrator
    from toolorchestra.core.errors import ConfigError, OrchestraError
    from toolorchestra.core.fs import json_text
    from toolorchestra.core.settings import load_settings
    from toolorchestra.llm.config import catalog_llms, pick_engine
    from toolorchestra.registry.policy import is_registry_ref, load_registered, observation_chars, system_prompt
    from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    settings = load_settings()
    local_engine = pick_engine(engine.value)
    cat = load_catalog(catalog) if catalog else None
    observation_limit: dict[str, int] = {}
    manifest: dict[str, Any] = {}
    if is_registry_ref(policy):  # models:/NAME@ALIAS or models:/NAME/VERSION from the MLflow registry
        registered = load_registered(policy, settings, engine=local_engine)
        llm, price = registered.llm, registered.price
        cat = cat or registered.catalog  # by default, the tools and prices it was trained with
        observation_limit = {"max_observation_chars": observation_chars(registered.manifest)}
        manifest = registered.manifest
    else:
        cat = cat or load_embedded_catalog()
        llm, price = resolve_policy(cat, policy, settings, local_engine)
    only = [t.strip() for t in tools.split(",") if t.strip()] if tools else None
    unknown = sorted(set(only or []) - {t.name for t in cat.tools})
    if unknown:
        raise ConfigError(None, f"{', '.join(unknown)}: not in the catalog; its tools: "
                          f"{', '.join(t.name for t in cat.tools)}", key="--tools")
    toolbox = build_toolbox(cat, settings, only=only, llm_for=catalog_llms(cat.models, local_engine, settings),
                            models_on_first_use=True, **observation_limit)
    if domain is not None:  # as a QA episode of that domain sees its tools
        from toolorchestra.envs.domain import load_domain
        from toolorchestra.envs.records import sandbox_files
        from toolorchestra.episodes.environment import scope_to_domain
        from toolorchestra.tools.toolbox import Toolbox

        if not (domain / "db.json").is_file():
            raise ConfigError(domain, "not a domain folder: no db.json in it", key="--domain")
        records = sandbox_files(load_domain(domain, name=domain.name))
        toolbox = Toolbox([scope_to_domain(t, domain.name, records) for t in toolbox.tools.values()],
                          prices=toolbox.prices, model_prices=toolbox.model_prices,
                          max_observation_chars=toolbox.max_observation_chars)
    # The prompt of training (and of the server): the system prompt with the offered tools' prices.
    orchestrator = Orchestrator(llm, toolbox, policy_price=price, max_turns=max_turns, max_tokens=max_tokens,
                                temperature=temperature, budget_usd=budget,
                                system_prompt=system_prompt(cat, manifest, only))
    trajectory = orchestrator.run(question, preference)
    trace_id = _trace(trajectory, settings, policy) if trace else None
    if as_json:
        # json_text: valid UTF-8 even if the model wrote a lone surrogate
        typer.echo(json_text({**trajectory.summary(), "trace_id": trace_id}))
    else:
        from orchestra_cli.render import print_trajectory

        print_trajectory(trajectory)
    if trajectory.stop_reason == "policy_error":  # the trajectory is shown, but this is no answer
        raise OrchestraError(f"the policy failed: {trajectory.error}")
