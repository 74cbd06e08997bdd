"""Preferences layer: measured tool descriptions, preference pairs, splits and training sets.

- `judge`: rule-based answer judges (exact match, numeric tolerance, containment), shared with
  training and evaluation;
- `pool`: the validated task pool (tool-use tasks in domain folders, QA JSONL);
- `measure` / `describe`: LLM tools measured on sampled tasks, descriptions that state the figures
  (the `describe` stage);
- `pairs`, `grammar`, `propose`, `expectations`, `split`: preference pairs from a template grammar
  or propose-then-verify LLMs, their Great Expectations suite, and the leak-free split;
- `assemble`, `export`, `build`: training instances with random tool subsets and perturbed prices,
  exported as verl parquet and a Hugging Face `datasets` folder (the `preferences` stage).
"""
