"""TRL's fused LM head made compact on a CPU: same loss and gradients, prompt positions unscored."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
trl_utils = pytest.importorskip("trl.trainer.utils")

from toolorchestra.rl.trl_cpu import compact_fused_head_on_cpu  # noqa: E402

KERNEL = trl_utils._ChunkedLogProbFunction  # TRL's tiled log-prob kernel, before any test wraps it


class _Vocab:
    """The little of a tokenizer `tiny_llama` reads."""

    eos_token_id, pad_token_id = 1, 1

    def __len__(self) -> int:
        return 64


@pytest.fixture
def restore_switch(monkeypatch):
    # TRL's own switch for the test (an earlier test's trainer may have installed the compact one),
    # and whatever was installed back afterwards
    switch = trl_utils._use_triton
    monkeypatch.setattr(trl_utils, "_use_triton", getattr(switch, "__wrapped__", switch))


def loss_and_grads(monkeypatch) -> tuple[float, torch.Tensor, list[int]]:
    """One fused-head forward/backward in fp32 over a sequence whose first 12 of 16 positions are
    prompt (label -100); also the row counts the head's tiles were given."""
    from helpers.tiny_models import tiny_llama

    model = tiny_llama(_Vocab())
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.arange(2, 18).unsqueeze(0)
    labels = ids.clone()
    labels[:, :12] = -100
    scored: list[int] = []
    class Counting:
        @staticmethod
        def apply(hidden, *args):
            scored.append(hidden.shape[0])
            return KERNEL.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counting)
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return out.loss.item(), grads, scored


def test_compact_head_scores_only_labelled_positions_with_identical_loss_and_grads(monkeypatch, restore_switch):
    loss_before, grads_before, scored_before = loss_and_grads(monkeypatch)
    assert compact_fused_head_on_cpu() is True
    loss_after, grads_after, scored_after = loss_and_grads(monkeypatch)
    # TRL's CPU path scores all 15 shifted positions; the compact one the 4 labelled ones
    assert scored_before == [15] and scored_after == [4]
    assert loss_after == pytest.approx(loss_before, rel=1e-6)
    assert torch.allclose(grads_after, grads_before, rtol=1e-5, atol=1e-7)


def test_switch_is_installed_once(restore_switch):
    trl_own = trl_utils._use_triton
    assert trl_own(torch.device("cpu")) is False  # TRL's CPU path scores every position
    assert compact_fused_head_on_cpu() and compact_fused_head_on_cpu()
    switch = trl_utils._use_triton
    assert switch(torch.device("cpu")) is True and switch.__wrapped__ is trl_own
    compact_fused_head_on_cpu()
    assert trl_utils._use_triton is switch  # not wrapped again


def test_a_trl_without_the_switch_trains_uncompacted_with_a_warning(monkeypatch, caplog):
    monkeypatch.delattr(trl_utils, "_use_triton")
    with caplog.at_level(logging.WARNING, logger="toolorchestra.rl.trl_cpu"):
        assert compact_fused_head_on_cpu() is False
    assert "score the prompt positions too" in caplog.text
