"""What an episode is, shared by training, evaluation and the preferences stage.

- `instance`: the one instance model (`Instance`: prompt, tools offered, prices, preference, task
  reference), the episode's `Preference`, and `DomainLocator`;
- `rows`: the one reader and writer of instances as verl rows (parquet, `datasets`, JSONL);
- `pool`: the validated task pool (tool-use tasks in domain folders, QA JSONL);
- `judge`: rule-based answer judges (exact match, numeric tolerance, containment);
- `environment`: `RolloutEnvironment`, which plays instances with the agent loop, and
  `score_rollout`, the one scorer of training and evaluation;
- `reward`: the composite reward and group advantages (paper Sec. 3).
"""
