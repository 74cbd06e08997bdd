"""SFT warm start: golden trajectories encoded like rollouts; SFTTrainer learns them."""

from __future__ import annotations

import pytest
import torch

from toolorchestra.rl.config import SFTSettings
from toolorchestra.rl.sft import golden_examples, run_sft, sft_trainer
from toolorchestra.rl.transcript import TranscriptEncoder


def test_golden_examples_train_only_the_policys_turns(make_env, splits, tiny_llm, caplog):
    tokenizer = tiny_llm.tokenizer
    env = make_env(max_domain_tools=3)
    with caplog.at_level("INFO", logger="toolorchestra.rl.sft"):
        examples = golden_examples(env, splits["train"], tokenizer, SFTSettings(max_examples=3))
    assert len(examples) == 3  # QA instances have no golden trajectory and are skipped
    assert "warm start: 3 golden trajectories (tool_use 3; 3 distinct)" in caplog.text  # the mix that sets the routing
    for example in examples:
        ids, mask = example["input_ids"], example["assistant_masks"]
        trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert trained.count("<tool_call>") >= 1 and trained.count("<|im_end|>") == trained.count("<tool_call>") + 1
        assert "<tool_response>" not in trained and "<|im_start|>" not in trained
    too_short = golden_examples(env, splits["train"], tokenizer, SFTSettings(max_length=64))
    assert too_short == []


def test_sft_lowers_the_loss_on_golden_trajectories(make_env, splits, tiny_llm, tmp_path):
    from transformers import LlamaForCausalLM

    tokenizer = tiny_llm.tokenizer
    examples = golden_examples(make_env(max_domain_tools=3), splits["train"], tokenizer, SFTSettings(max_examples=2))
    model = LlamaForCausalLM(tiny_llm.lm.config)
    model.load_state_dict(tiny_llm.lm.state_dict())

    def loss() -> float:
        ids = torch.tensor([examples[0]["input_ids"]])
        labels = ids.clone()
        labels[0, torch.tensor(examples[0]["assistant_masks"]) == 0] = -100
        with torch.no_grad():
            return float(model(input_ids=ids, labels=labels).loss)

    before = loss()
    metrics = run_sft(sft_trainer(model, tokenizer, examples, SFTSettings(steps=4, batch_size=2, learning_rate=1e-2),
                                  tmp_path))
    assert metrics["sft/train_loss"] > 0
    assert loss() < before - 0.5
    with pytest.raises(ValueError, match="no golden trajectories"):
        sft_trainer(model, tokenizer, [], SFTSettings(steps=1), tmp_path)
    assert TranscriptEncoder(tokenizer).eos_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_sft_batches_group_examples_of_similar_length(tiny_llm, tmp_path):
    """Padding is compute: a batch is padded to its longest example, so batches drawn by length
    waste fewer tokens than random ones (the demo's golden trajectories run from ~460 to ~1.5k)."""
    from transformers import LlamaForCausalLM

    lengths = [16 + 8 * (i % 12) for i in range(96)]  # short and long interleaved, as QA and tool use
    examples = [{"input_ids": [5] * n, "assistant_masks": [1] * n} for n in lengths]
    model = LlamaForCausalLM(tiny_llm.lm.config)

    def padded_tokens(group_by_length: bool) -> int:
        settings = SFTSettings(steps=1, batch_size=4, micro_batch_size=4, group_by_length=group_by_length)
        trainer = sft_trainer(model, tiny_llm.tokenizer, examples, settings, tmp_path, seed=0)
        batches = list(trainer.get_train_dataloader())
        assert sum(len(b["input_ids"]) for b in batches) == len(examples)  # every example, once
        return sum(b["input_ids"].numel() for b in batches)

    grouped, random_order = padded_tokens(True), padded_tokens(False)
    assert grouped < 0.8 * random_order
    assert grouped < 1.15 * sum(lengths)


def test_one_sequence_per_pass_with_accumulation_takes_the_batchs_gradient(tiny_llm, tmp_path):
    """On a CPU each sequence runs alone (no padding, unmasked attention) and a step accumulates
    batch_size of them: the step's gradient must be the padded batch's (the loss normalised over
    the step's assistant tokens, not averaged per sequence or summed)."""
    from transformers import LlamaForCausalLM

    examples = [{"input_ids": [7 + i] * n, "assistant_masks": [0] * (n - k) + [1] * k}
                for i, (n, k) in enumerate([(12, 3), (30, 20), (18, 1), (25, 9)])]

    def first_grad_norm(micro: int | None) -> tuple[float, int]:
        model = LlamaForCausalLM(tiny_llm.lm.config)
        model.load_state_dict(tiny_llm.lm.state_dict())
        settings = SFTSettings(steps=1, batch_size=4, micro_batch_size=micro)
        trainer = sft_trainer(model, tiny_llm.tokenizer, examples, settings, tmp_path / str(micro), seed=0)
        rows = {len(b["input_ids"]) for b in trainer.get_train_dataloader()}
        trainer.train()
        return trainer.state.log_history[0]["grad_norm"], max(rows)

    padded, rows = first_grad_norm(4)
    assert rows == 4
    accumulated, rows = first_grad_norm(None)  # the CPU default: one sequence per pass
    assert rows == 1
    assert accumulated == pytest.approx(padded, rel=1e-3)
    with pytest.raises(ValueError, match="must divide"):
        SFTSettings(batch_size=4, micro_batch_size=3)


def test_a_stratified_warm_start_deals_every_category_before_any_repeats():
    """Before, the first max_examples followed the pool's mix (the 2026-12-04 demo: ~14 counts and ~6
    aggregates among 96, and every held-out count went to local_search)."""
    import random
    from types import SimpleNamespace

    from toolorchestra.rl.sft import interleave_strata, stratum

    pool = [SimpleNamespace(kind="qa", task={"category": c}, id=f"{c}{i}")
            for c, n in (("arithmetic", 6), ("lookup", 4), ("count", 2)) for i in range(n)]
    pool.append(SimpleNamespace(kind="tool_use", task={}, id="ticket"))
    random.Random(0).shuffle(pool)
    dealt = interleave_strata(pool)
    assert sorted(stratum(x) for x in dealt[:4]) == ["arithmetic", "count", "lookup", "tool_use"]
    assert sorted(stratum(x) for x in dealt[4:7]) == ["arithmetic", "count", "lookup"]
    assert sorted(x.id for x in dealt) == sorted(x.id for x in pool)  # nothing lost or repeated
    by_pool = [x.id for x in pool if stratum(x) == "arithmetic"]
    assert [x.id for x in dealt if stratum(x) == "arithmetic"] == by_pool  # each stratum keeps the seeded order


def test_a_repeated_stratum_is_dealt_in_passes_and_the_cut_drops_repeats_first():
    """The demo's train split holds 8 golden tickets against 42 lookups calling
    `local_search {"query": ...}`, and its policy sent every held-out ticket's domain tool a `query`
    argument: `repeat` weighs a rare stratum up without synthesizing more tasks."""
    from types import SimpleNamespace

    from toolorchestra.rl.sft import interleave_strata, repeated

    pool = [SimpleNamespace(kind="qa", task={"category": "arithmetic"}, id=f"a{i}") for i in range(6)]
    pool += [SimpleNamespace(kind="tool_use", task={}, id=f"t{i}") for i in range(2)]
    dealt = interleave_strata(pool, {"tool_use": 3})
    tickets = [x.id for x in dealt if x.kind == "tool_use"]
    assert tickets == ["t0", "t1"] * 3  # each ticket once before any twice
    assert [x.id for x in dealt[:4]] == ["a0", "t0", "a1", "t1"]
    assert [x.id for x in repeated(pool, {"tool_use": 2})] == [x.id for x in pool] + ["t0", "t1"]
    assert repeated(pool, {}) == pool
    from toolorchestra.rl.config import SFT_STRATA
    from toolorchestra.synthesis.qa import CATEGORIES

    assert set(SFT_STRATA) == {"tool_use", "first_call", "recovery", *CATEGORIES}  # every QA category can be repeated
    with pytest.raises(ValueError, match="unknown strata"):
        SFTSettings(repeat={"tickets": 2})
    with pytest.raises(ValueError, match="at least 1"):
        SFTSettings(repeat={"tool_use": 0})


def test_golden_examples_repeat_a_stratum_without_replaying_it_again(make_env, splits, tiny_llm, caplog, monkeypatch):
    env = make_env(max_domain_tools=3)
    replays = []
    original = env.golden_conversation
    monkeypatch.setattr(env, "golden_conversation", lambda instance: replays.append(instance.id) or original(instance))
    with caplog.at_level("INFO", logger="toolorchestra.rl.sft"):
        examples = golden_examples(env, splits["train"], tiny_llm.tokenizer,
                                   SFTSettings(max_examples=None, stratify=True, repeat={"tool_use": 2}))
    distinct = {tuple(e["input_ids"]) for e in examples}
    assert len(examples) == 2 * len(distinct) and len(replays) == len(set(replays))
    assert f"(tool_use {len(examples)}; {len(distinct)} distinct)" in caplog.text


def test_first_call_examples_train_a_longer_tasks_first_golden_call_alone(make_env, tool_use, tiny_llm, caplog):
    """Tickets of at most max_actions golden calls are few (8 in the demo's train split); the
    longer tasks' first calls teach the same first turn: a domain tool with its own parameters."""
    from toolorchestra.rl.config import TrainConfig
    from toolorchestra.rl.train import first_call_pool

    env = make_env(max_domain_tools=3)
    task = tool_use[0]
    messages, specs = env.golden_first_call(task)
    action = task.tau2_task.actions[0]
    assert messages[:-1] == [dict(m) for m in task.prompt] and messages[-1]["role"] == "assistant"
    assert action.name in messages[-1]["content"] and action.name in {s["function"]["name"] for s in specs}
    tokenizer = tiny_llm.tokenizer
    with caplog.at_level("INFO", logger="toolorchestra.rl.sft"):
        examples = golden_examples(env, [], tokenizer, SFTSettings(max_examples=None, first_calls=2),
                                   first_call_pool=tool_use)
    assert len(examples) == 2 and "(first_call 2; 2 distinct)" in caplog.text
    trained = tokenizer.decode([t for t, m in zip(examples[0]["input_ids"], examples[0]["assistant_masks"], strict=True)
                                if m])
    assert trained.count("<tool_call>") == 1 and trained.endswith("<|im_end|>")  # the call, and nothing after it
    assert golden_examples(env, [], tokenizer, SFTSettings(max_examples=None), first_call_pool=tool_use) == []

    shortest = min(len(i.tau2_task.actions) for i in tool_use)
    config = TrainConfig.model_validate({"data": {"max_actions": shortest}, "sft": {"first_calls": 4}})
    pool = first_call_pool(config, tool_use)
    assert pool and all(len(i.tau2_task.actions) > shortest for i in pool)
    assert first_call_pool(config.model_copy(update={"sft": SFTSettings()}), tool_use) == []


def test_a_broken_program_fails_the_way_the_policy_fails():
    """The three breaks seen in the evaluation's trajectories: the table named by a field, an
    argument left out, the closing bracket missing; a calculation can only lose its bracket."""
    import ast
    import random

    from toolorchestra.rl.sft import broken_program

    aggregate = "print(average('fees late fee', 'loans', 'member id', find('members', 'phone', '267')))"
    seen = {broken_program(aggregate, random.Random(seed)) for seed in range(40)}
    assert seen == {
        "print(average('fees late fee', 'member id', 'member id', find('members', 'phone', '267')))",
        "print(average('fees late fee', 'loans', find('members', 'phone', '267')))",
        aggregate[:-1],
    }
    count = "print(count('loans', 'status', 'lost'))"
    assert {broken_program(count, random.Random(seed)) for seed in range(40)} == {
        "print(count('status', 'status', 'lost'))", "print(count('loans', 'lost'))", count[:-1]}
    assert {broken_program("print(17 * 23)", random.Random(seed)) for seed in range(10)} == {"print(17 * 23"}
    assert broken_program("print(", random.Random(0)) is None
    for program in seen - {aggregate[:-1]}:
        ast.parse(program)  # the others are valid Python that fails when it runs


def test_recovery_examples_train_the_retry_and_not_the_broken_call(records_qa, tiny_llm, caplog):
    env, instances, _, _ = records_qa
    tokenizer = tiny_llm.tokenizer
    settings = SFTSettings(max_examples=None, stratify=True, recoveries=["count", "aggregate"])
    with caplog.at_level("INFO", logger="toolorchestra.rl.sft"):
        examples = golden_examples(env, instances, tokenizer, settings)
    programs = sum(i.task.get("category") in ("count", "aggregate") for i in instances)
    recoveries = [e for e in examples if "exit status: 1" in tokenizer.decode(e["input_ids"])]
    assert programs and len(recoveries) == programs and f"recovery {programs}" in caplog.text
    for example in recoveries:
        ids, mask = example["input_ids"], example["assistant_masks"]
        text = tokenizer.decode(ids)
        trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert trained.count("<tool_call>") == 1  # the retry, not the broken call
        calls = [part.split("</tool_call>")[0].strip() for part in text.split("<|im_start|>assistant")[1].split("<tool_call>")[1:]]
        calls += [part.split("</tool_call>")[0].strip() for part in text.split("<|im_start|>assistant")[2].split("<tool_call>")[1:]]
        broken, retry = calls
        assert retry in trained
        assert trained.endswith("<|im_end|>") and broken not in trained
    without = golden_examples(env, instances, tokenizer, SFTSettings(max_examples=None, stratify=True))
    assert len(without) == len(examples) - programs
    with pytest.raises(ValueError):
        SFTSettings(recoveries=["lookup"])  # a lookup has no program to break
