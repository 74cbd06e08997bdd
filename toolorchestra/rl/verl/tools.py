"""`OrchestraTool`: a thin verl `BaseTool` adapter over the project's tools.

Listed in the generated tool-config YAML (one entry per tool name, class
`toolorchestra.rl.verl.tools.OrchestraTool`). `execute` runs the call on the current trajectory's
`VerlEpisode` (set by our agent loop): the episode's toolbox validates the arguments, runs the tool
(a domain tool on that trajectory's own database, an LLM expert, code, search), prices it from the
instance's catalog prices and times it. Mistakes come back as error observations, never
exceptions. The call's cost and latency are kept in `agent_data.extra_fields["orchestra_calls"]`
(running totals) and returned as the tool's metrics.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from toolorchestra.rl.verl.episode import CURRENT


class OrchestraTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        # BaseTool.__init__ prints every schema; agent loops build these per episode, so set the
        # same attributes quietly.
        self.config = config or {}
        self.tool_schema = tool_schema
        self.name = tool_schema.function.name

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        episode = CURRENT.get()
        if episode is None:
            return ToolResponse(text=f"Error: {self.name} is unavailable: no orchestra episode is active "
                                "(run it through the orchestra_agent loop)"), 0.0, {}
        result = await asyncio.to_thread(episode.call, self.name, dict(parameters or {}))
        agent_data = kwargs.get("agent_data")
        if agent_data is not None and hasattr(agent_data, "extra_fields"):
            agent_data.extra_fields["orchestra_calls"] = episode.running_totals()
        metrics = {"cost_usd": result.cost_usd, "latency_s": result.latency_s, "ok": result.ok}
        return ToolResponse(text=result.observation), 0.0, metrics
