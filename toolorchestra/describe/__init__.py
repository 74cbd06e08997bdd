"""Tool descriptions from measured behaviour (the `describe` stage).

- `measure`: every LLM tool x expert model run on sampled tasks per category: accuracy, tokens,
  cost and latency;
- `descriptions`: catalog descriptions that state those figures (and optional LLM summaries).
"""
