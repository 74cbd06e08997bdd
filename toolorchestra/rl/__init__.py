"""Training: the SFT warm start and GRPO (TRL on one machine, verl on a Ray cluster).

Episodes, instances and the reward they optimise live in `toolorchestra.episodes`.
"""
