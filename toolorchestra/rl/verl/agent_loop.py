"""`orchestra_agent`: verl's `ToolAgentLoop` with the project's per-episode environment.

Registered under the name `orchestra_agent` (the parquet's `agent_name`), and listed in the
generated agent-loop YAML (`actor_rollout_ref.rollout.agent.agent_loop_config_path`) with its
settings, so verl's workers import it. Per trajectory it:

1. decodes the row into an `Instance` and starts a `VerlEpisode` (fresh database state for a
   tool-use task, the instance's prices), made current for the tools via a context variable;
2. offers exactly that episode's tools (their own schemas, capped like the TRL backend), by
   replacing verl's per-sample tool selection;
3. ends the trajectory when the `answer` tool delivered the final answer, as the project's loop
   does;
4. after verl's loop returns, rebuilds the trajectory from the response tokens and mask, scores
   it with the shared scorer, and stores the record the reward module needs in
   `extra_fields["orchestra"]` (group id, correctness, validity, metrics, preference).

Everything else (generation via the vLLM server, the Hermes tool parser, token bookkeeping and the
response mask that keeps tool tokens out of the loss) is verl's.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.tool_agent_loop import AgentState, ToolAgentLoop
from verl.tools.schemas import OpenAIFunctionToolSchema

from toolorchestra.episodes.rows import from_verl_row
from toolorchestra.rl.verl.data import AGENT_NAME, verl_schema
from toolorchestra.rl.verl.episode import CURRENT, VerlEpisode, environment
from toolorchestra.rl.verl.tools import OrchestraTool


@register(AGENT_NAME)
class OrchestraAgentLoop(ToolAgentLoop):
    def __init__(self, *args: Any, catalog: str | None = None, data_roots: list[str] | None = None,
                 episode: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.pop("name", None)  # the YAML entry's own name is not a constructor argument
        super().__init__(*args, **kwargs)
        self.catalog_path, self.data_roots, self.episode_settings = catalog, list(data_roots or []), dict(episode or {})

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        row = {"prompt": kwargs["raw_prompt"], "extra_info": kwargs.get("extra_info") or {},
               "data_source": kwargs.get("data_source")}
        instance = from_verl_row(row, source=f"verl sample {kwargs.get('uid', '?')}")
        env = environment(self.catalog_path, self.data_roots, self.episode_settings)
        episode = VerlEpisode.start(env, instance)
        token = CURRENT.set(episode)
        try:
            output = await super().run(sampling_params, **kwargs)
        finally:
            CURRENT.reset(token)
        group = kwargs.get("uid") if kwargs.get("uid") is not None else instance.id
        output.extra_fields["orchestra"] = episode.finish(
            len(output.prompt_ids), list(output.response_ids), list(output.response_mask), self.tokenizer,
            generate_s=float(output.metrics.generate_sequences or 0.0), group=str(group),
            session=kwargs.get("session_id"), group_size=self.rollout_config.n,
        )
        output.extra_fields.pop("orchestra_calls", None)
        return output

    async def _handle_pending_state(self, agent_data: Any, sampling_params: dict[str, Any]) -> AgentState:
        episode = CURRENT.get()
        if episode is not None:
            tools = {}
            for spec in episode.setup.specs:
                schema = OpenAIFunctionToolSchema.model_validate(verl_schema(spec))
                tools[schema.function.name] = OrchestraTool({"type": "native"}, schema)
            agent_data._active_tools = tools
            agent_data._active_tool_schemas = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
                                               for t in tools.values()]
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _handle_processing_tools_state(self, agent_data: Any) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        episode = CURRENT.get()
        if episode is not None and episode.done:
            return AgentState.TERMINATED
        return state
