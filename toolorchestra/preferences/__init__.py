"""Preferences layer: preference pairs, their validation and split, and the training set.

- `pairs`, `grammar`, `propose`, `expectations`, `split`: preference pairs from a template grammar
  or propose-then-verify LLMs, their Great Expectations suite, and the leak-free split;
- `assemble`, `build`: training instances (`toolorchestra.episodes.Instance`) with random tool
  subsets and perturbed prices, exported as verl rows (the `preferences` stage).
"""
