"""The verl backend (cluster): verl 0.9 GRPO on Ray with vLLM rollouts, over the same environment,
tools and reward as the TRL backend. See `compose.py` (configuration), `data.py` (parquet),
`tools.py` (BaseTool adapters), `agent_loop.py` (the registered agent loop), `reward.py`
(`custom_reward_function`) and `launch.py` (running it)."""
