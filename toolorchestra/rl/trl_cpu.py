"""TRL's fused LM head on a CPU: score only the labelled positions.

TRL's SFT and GRPO trainers project the last hidden states through the LM head in tiles
(`trl.trainer.utils.add_fused_lm_head`) instead of building the full logits. On a Triton device
the head scores only the positions that carry a label; anywhere else it scores every position, to
keep tile shapes fixed for compilers such as Neuron's, and its backward recomputes the whole
vocabulary's logits for each. On a CPU in eager mode shapes cost nothing, and most of a policy
transcript is prompt: the demo's 144 golden trajectories carry a label on 7.6k of their 118k
tokens (6%), a GRPO rollout only on its completion. Scoring the prompt too took half the SFT
step: SmolLM2-135M, bf16 autocast, 2 cores of an Intel Xeon with AMX (2026-12-05), 180 tokens/s
against 392 with the compact head on the warm start's own golden trajectories, with the same
loss and, in fp32, the same gradients (`benchmarks/bench_train.py` prints both arms).

TRL decides "compact or not" with the `_use_triton` it imports into `trl.trainer.utils`; its
kernels import their own copy to pick Triton or torch tiles. Replacing the first copy alone makes
the CPU path compact and leaves the kernels on torch tiles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_MARK = "_toolorchestra_compact_on_cpu"


def compact_fused_head_on_cpu() -> bool:
    """Make TRL's fused LM head score only labelled positions on a CPU too (idempotent); False,
    with a warning, when this TRL has no such switch (training stays correct, only slower)."""
    import trl
    import trl.trainer.utils as trl_utils

    current: Callable[[Any], bool] | None = getattr(trl_utils, "_use_triton", None)
    if current is None or not hasattr(trl_utils, "add_fused_lm_head"):
        log.warning("this TRL (%s) has no fused-LM-head switch to make compact on a CPU: SFT and GRPO "
                    "steps score the prompt positions too (about half the CPU step)",
                    trl.__version__)
        return False
    if getattr(current, _MARK, False):
        return True

    def compact(device: Any) -> bool:
        return device.type == "cpu" or current(device)

    setattr(compact, _MARK, True)
    compact.__wrapped__ = current  # type: ignore[attr-defined]  # TRL's own, for a caller that needs it back
    trl_utils._use_triton = compact
    return True
