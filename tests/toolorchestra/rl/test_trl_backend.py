"""TRL backend with the tiny model: the reward contract reaches TRL's advantages, tool tokens are
masked out of the loss, and a GRPO step updates the policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolorchestra.episodes.instance import Preference
from toolorchestra.episodes.reward import group_advantages, group_rewards
from toolorchestra.llm.base import Completion, Usage
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.rl.config import GRPOSettings
from toolorchestra.rl.transcript import RolloutPolicy
from toolorchestra.rl.trl_backend import build_grpo_trainer, prompt_row

PLAN = ("golden", "detour", "wrong", "malformed")


class ScriptedRolloutPolicy(RolloutPolicy):
    """The trained model's place in the rollout, but with scripted turns (recorded as sampled ids,
    as the real policy records them), so a group has a known mix of outcomes."""

    plan: tuple[str, ...] = PLAN

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.order: list[int] = []

    def bind(self, messages, tools):
        super().bind(messages, tools)
        self.order.append(id(messages))

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        out = []
        for messages in batch:
            behaviour = self.plan[self.order.index(id(messages)) % len(self.plan)]
            text, final = self.turn(behaviour, messages)
            ids = self.encoder.text_ids(text) + ([self.encoder.eos_id] if final else [])
            self._binding(messages).sampled.append(ids)
            out.append(Completion(text=text, usage=Usage(prompt_tokens=len(self.context(messages)), completion_tokens=len(ids)),
                                  latency_s=0.01 * len(ids), model="scripted"))
        return out

    def turn(self, behaviour, messages):
        instance = self.instance
        actions = instance.tau2_task.actions
        done = sum(m["role"] == "assistant" for m in messages)
        if behaviour == "malformed":
            return '<tool_call>\n{"name": broken}\n</tool_call>', False
        if behaviour == "wrong":
            return "Sorry, no idea.", True
        if behaviour == "detour":  # the golden calls with an extra read first: correct but costlier
            first = actions[0]
            if done == 0:
                return format_tool_call(first.name, first.arguments), False
            done -= 1
        if done < len(actions):
            return format_tool_call(actions[done].name, actions[done].arguments), False
        return "Done. " + "; ".join(instance.tau2_task.communicate_info), True


@pytest.fixture
def instance(tool_use):
    chosen = next(i for i in tool_use if i.tau2_task.communicate_info and len(i.tau2_task.actions) <= 2)
    cheap = Preference(id="cost", kind="cost", instruction="Keep it cheap.", vector={"accuracy": 1.0, "cost": 1.0})
    return chosen.model_copy(update={"preference": cheap})


@pytest.fixture
def trainer(tiny_dir, tiny_llm, make_env, instance, tmp_path):
    env = make_env(max_turns=4, max_tokens=48)
    settings = GRPOSettings(steps=1, num_generations=4, learning_rate=1e-3, max_completion_length=2048)
    trainer = build_grpo_trainer(tiny_dir, tiny_llm.tokenizer, env, [instance], settings, tmp_path / "grpo",
                                 use_cpu=True, seed=0)

    def factory(model, tokenizer, name="policy"):
        policy = ScriptedRolloutPolicy(model, tokenizer, name=name)
        policy.instance = instance
        return policy

    trainer.orchestra_rollouts.policy_factory = factory
    return trainer


def generation_batch(trainer, n):
    trainer.model.train()
    return [dict(trainer.train_dataset[0]) for _ in range(n)]


def scripted(trainer, plan, n):
    """TRL's generation batch of `n` rollouts whose turns follow `plan` (one behaviour per rollout)."""
    ScriptedRolloutPolicy.plan = plan
    try:
        return trainer._generate_and_score_completions(generation_batch(trainer, n))
    finally:
        ScriptedRolloutPolicy.plan = PLAN


def test_trl_advantages_are_the_reward_contracts(trainer, instance):
    out = trainer._generate_and_score_completions(generation_batch(trainer, 4))
    rollouts = trainer.orchestra_rollouts.last
    assert [r.valid for r in rollouts] == [True, True, True, False]
    assert [r.correct for r in rollouts] == [True, True, False, False]
    # The malformed rollout stays in its group as a wrong one (reward 0, on the cost scale).
    rewards = group_rewards([r.metrics() for r in rollouts], [r.valid and r.correct for r in rollouts],
                            instance.preference.vector, GRPOSettings().dead_band.bands())
    expected = group_advantages(rewards)
    assert expected is not None and rewards[0] > rewards[1] > rewards[2] == rewards[3] == 0.0  # cheaper correct wins
    got = out["advantages"].tolist()
    assert got == pytest.approx(expected, abs=1e-5)
    assert got[3] < 0  # wrong: pushed down, no longer "no gradient"
    assert trainer.orchestra_reward.last_rewards == pytest.approx(rewards)
    assert trainer.orchestra_reward.last_stats["groups_filtered"] == 0.0


def test_invalid_rollouts_count_as_wrong_so_a_right_right_invalid_invalid_group_trains(trainer):
    # Before: the two invalid rollouts were dropped, the two right ones tied, and the group was
    # filtered (advantages [0, 0, 0, 0]). The released code keeps them as wrong.
    out = scripted(trainer, ("golden", "golden", "malformed", "malformed"), 4)
    assert [r.valid for r in trainer.orchestra_rollouts.last] == [True, True, False, False]
    got = out["advantages"].tolist()
    assert got[0] == got[1] > 0 > got[2] == got[3]
    assert got == pytest.approx([0.866, 0.866, -0.866, -0.866], abs=1e-3)
    assert trainer.orchestra_reward.last_stats["groups_filtered"] == 0.0
    assert out["tool_mask"][2].sum() > 0  # the invalid ones are trained (pushed down) too


def test_a_group_without_spread_is_filtered(trainer):
    out = scripted(trainer, ("golden",) * 4, 4)
    assert out["advantages"].tolist() == [0.0] * 4
    assert trainer.orchestra_reward.last_stats["groups_filtered"] == 1.0
    assert trainer.orchestra_reward.last_stats["frac_reward_zero_std"] == 1.0
    assert trainer.orchestra_reward.last_stats["completions_masked"] == 1.0
    assert out["tool_mask"].sum() == 0 and out["num_items_in_batch"] == 0  # nothing left to train
    # what the policy sampled is still counted (bench_train_gpu's generation tokens/s)
    assert trainer.orchestra_rollouts.last_sampled_tokens > 0


def refilling_trainer(tiny_dir, tiny_llm, make_env, instances, tmp_path, rounds):
    """The fixture's trainer over `instances`, drawing up to `rounds` fresh groups for a dead one."""
    settings = GRPOSettings(steps=1, num_generations=4, learning_rate=1e-3, max_completion_length=2048,
                            refill_rounds=rounds)
    trainer = build_grpo_trainer(tiny_dir, tiny_llm.tokenizer, make_env(max_turns=4, max_tokens=48), instances,
                                 settings, tmp_path / "grpo", use_cpu=True, seed=0)

    def factory(model, tokenizer, name="policy"):
        policy = ScriptedRolloutPolicy(model, tokenizer, name=name)
        policy.instance = instances[0]  # the twins share the task: the same golden calls
        return policy

    trainer.orchestra_rollouts.policy_factory = factory
    return trainer


def test_a_group_without_spread_is_replaced_by_a_fresh_instances_group_with_spread(tiny_dir, tiny_llm, make_env,
                                                                                  instance, tmp_path):
    # Before, a group whose four rollouts all solved the task was masked out and the step trained on
    # fewer groups; with refill_rounds a fresh training instance is drawn for it (DAPO's dynamic
    # sampling), and a group with spread takes its place.
    twins = [instance.model_copy(update={"id": f"{instance.id}-{k}"}) for k in range(3)]
    trainer = refilling_trainer(tiny_dir, tiny_llm, make_env, [instance, *twins], tmp_path, rounds=2)
    row = dict(trainer.train_dataset[0])
    # the first draw all golden (no spread), the first refill too, the second one mixed
    ScriptedRolloutPolicy.plan = ("golden",) * 8 + PLAN
    try:
        trainer.model.train()
        out = trainer._generate_and_score_completions([dict(row) for _ in range(4)])
    finally:
        ScriptedRolloutPolicy.plan = PLAN
    rollouts = trainer.orchestra_rollouts.last
    assert len({r.instance.id for r in rollouts}) == 1 and rollouts[0].instance.id != row["instance_id"]
    assert [r.correct for r in rollouts] == [True, True, False, False]
    assert out["tool_mask"].sum() > 0 and out["advantages"].abs().sum() > 0  # it trains
    stats = trainer.orchestra_reward.last_stats
    assert stats["groups_refilled"] == 1.0 and stats["groups_filtered"] == 0.0
    # every sampled token counts, the discarded groups' too (generation tokens/s)
    kept = int((out["completion_mask"] * out["tool_mask"]).sum())
    assert trainer.orchestra_rollouts.last_sampled_tokens > 2 * kept


def test_without_a_fresh_group_with_spread_the_dead_group_stays_filtered(tiny_dir, tiny_llm, make_env, instance,
                                                                         tmp_path):
    twin = instance.model_copy(update={"id": f"{instance.id}-twin"})
    trainer = refilling_trainer(tiny_dir, tiny_llm, make_env, [instance, twin], tmp_path, rounds=3)
    out = scripted(trainer, ("golden",) * 4, 4)  # every draw all golden; the pool runs out after one
    assert trainer.orchestra_rollouts.last[0].instance.id in {instance.id, twin.id}
    assert out["tool_mask"].sum() == 0
    stats = trainer.orchestra_reward.last_stats
    assert stats["groups_refilled"] == 0.0 and stats["groups_filtered"] == 1.0


def test_a_filtered_group_leaves_the_loss_and_its_normaliser(trainer):
    # Two groups in one batch: all-golden (no spread: filtered) and the mixed plan. Before, the
    # filtered group's tokens stayed in TRL's loss mask with advantage 0 and inflated the DAPO
    # normaliser (num_items_in_batch), so the mixed group's update was diluted.
    both = scripted(trainer, ("golden",) * 4 + PLAN, 8)
    mask = both["completion_mask"] * both["tool_mask"]
    assert mask[:4].sum() == 0 and mask[4:].sum() > 0
    assert both["num_items_in_batch"] == mask[4:].sum()
    stats = trainer.orchestra_reward.last_stats
    assert stats["groups_filtered"] == 0.5 and stats["completions_masked"] == 0.5
    alone = trainer._generate_and_score_completions(generation_batch(trainer, 4))  # the mixed group alone
    assert both["num_items_in_batch"] == alone["num_items_in_batch"]
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which is not running
    with torch.no_grad():
        loss_both = trainer.compute_loss(trainer.model, both)
        loss_alone = trainer.compute_loss(trainer.model, alone)
    assert loss_alone != 0 and loss_both == pytest.approx(loss_alone.item(), rel=1e-4)


def test_a_micro_batch_forwards_only_the_rows_it_trains(trainer):
    # TRL shuffles a step's rollouts across micro-batches, so a filtered group's masked rows sit
    # among trained ones. Before, each still cost a forward and backward that added nothing.
    from trl import GRPOTrainer

    both = scripted(trainer, ("golden",) * 4 + PLAN, 8)
    order = torch.tensor([4, 0, 5, 1, 6, 2, 7, 3])  # interleaved, as TRL's shuffle leaves them
    batch = {k: v[order] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == 8 else v
             for k, v in both.items()}
    # a left-padding column no row uses, as a batch of several instances' prompts has
    batch["prompt_ids"] = torch.cat([torch.zeros_like(batch["prompt_ids"][:, :1]), batch["prompt_ids"]], dim=1)
    batch["prompt_mask"] = torch.cat([torch.zeros_like(batch["prompt_mask"][:, :1]), batch["prompt_mask"]], dim=1)
    trainer.current_gradient_accumulation_steps = 1
    seen: list[tuple[int, ...]] = []
    hook = trainer.model.register_forward_hook(lambda _m, args, kwargs, _o: seen.append(tuple(kwargs["input_ids"].shape)),
                                               with_kwargs=True)

    def loss_and_grads(compute):
        trainer.model.zero_grad()
        loss = compute(trainer.model, batch)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    try:
        loss_all, grads_all = loss_and_grads(lambda m, b: GRPOTrainer._compute_loss(trainer, m, b))
        loss_kept, grads_kept = loss_and_grads(trainer._compute_loss)
    finally:
        hook.remove()
    width = batch["prompt_ids"].size(1) + batch["completion_ids"].size(1)
    assert seen[0] == (8, width) and len(seen) == 1 + 4  # then the 4 trained rows, one at a time
    assert all(shape[0] == 1 and shape[1] < width for shape in seen[1:])
    assert loss_all != 0 and loss_kept == pytest.approx(loss_all, rel=1e-4)
    assert len(grads_kept) == len(grads_all)
    for a, b in zip(grads_kept, grads_all, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)


def test_a_micro_batch_of_filtered_rows_runs_no_forward(trainer):
    out = scripted(trainer, ("golden",) * 4, 4)
    trainer.current_gradient_accumulation_steps = 1
    calls = []
    hook = trainer.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, out)
        loss.backward()  # the training loop calls backward on whatever comes back
    finally:
        hook.remove()
    assert calls == [] and loss.item() == 0.0
    assert all(p.grad is None or not p.grad.any() for p in trainer.model.parameters())


def test_loss_rows_keep_the_rows_and_columns_a_loss_uses():
    from toolorchestra.rl.trl_backend import loss_rows

    inputs = {
        "prompt_ids": torch.tensor([[0, 0, 5, 6], [0, 7, 8, 9], [1, 2, 3, 4]]),
        "prompt_mask": torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]),
        "completion_ids": torch.tensor([[10, 11, 0], [12, 0, 0], [13, 14, 15]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
        "tool_mask": torch.tensor([[1, 1, 1], [1, 1, 1], [0, 0, 0]]),  # the third row: a filtered group's
        "advantages": torch.tensor([0.5, -0.5, 0.0]),
        "num_items_in_batch": torch.tensor(3),
        "old_per_token_logps": None,
    }
    first, second = loss_rows(inputs)
    assert first["prompt_ids"].tolist() == [[5, 6]] and first["completion_ids"].tolist() == [[10, 11]]
    assert second["prompt_ids"].tolist() == [[7, 8, 9]] and second["completion_ids"].tolist() == [[12]]
    assert second["tool_mask"].tolist() == [[1]] and second["advantages"].tolist() == [-0.5]
    assert second["num_items_in_batch"] == 3 and second["old_per_token_logps"] is None  # the step's, untouched
    [both] = loss_rows(inputs, one_per_row=False)  # a GPU's: the kept rows as one batch
    assert both["prompt_ids"].tolist() == [[0, 5, 6], [7, 8, 9]]  # only the shared padding goes
    assert both["completion_ids"].tolist() == [[10, 11], [12, 0]]
    assert both["advantages"].tolist() == [0.5, -0.5]
    inputs["tool_mask"] = torch.zeros(3, 3, dtype=torch.long)
    assert loss_rows(inputs) == [] and loss_rows(inputs, one_per_row=False) == []


def test_the_dead_band_reaches_the_trl_reward(trainer, instance):
    # GRPO settings carry the dead band to the reward function: a huge cost band makes every cost
    # difference "constant", so the right rollouts tie and only accuracy separates them.
    reward = trainer.orchestra_reward
    trainer._generate_and_score_completions(generation_batch(trainer, 4))
    rollouts = trainer.orchestra_rollouts.last
    wide = GRPOSettings(dead_band={"cost": {"absolute": 1.0}}).dead_band.bands()
    saved, reward.dead_band = reward.dead_band, wide
    try:
        score = reward.score(rollouts)
    finally:
        reward.dead_band = saved
    assert score.rewards[0] == score.rewards[1] == 1.0 and score.rewards[2:] == [0.0, 0.0]
    assert reward.score(rollouts).rewards[0] > reward.score(rollouts).rewards[1]  # default band: cost counts


def test_tool_tokens_are_masked_from_the_loss(trainer, tiny_llm):
    tokenizer = tiny_llm.tokenizer
    out = trainer._generate_and_score_completions(generation_batch(trainer, 4))
    for row, rollout in enumerate(trainer.orchestra_rollouts.last[:2]):
        ids = out["completion_ids"][row]
        loss_mask = (out["completion_mask"][row] * out["tool_mask"][row]).bool()
        trained = tokenizer.decode(ids[loss_mask])
        ignored = tokenizer.decode(ids[~loss_mask & out["completion_mask"][row].bool()])
        observations = [t.observation for t in rollout.trajectory.turns if t.observation]
        assert observations and all(o in ignored and o not in trained for o in observations)
        assert "<tool_response>" in ignored and "<tool_response>" not in trained
        assert "<tool_call>" in trained
        assert trained.endswith("<|im_end|>")  # the final reply's end of turn is the policy's


def test_one_grpo_step_moves_the_policy_and_logs_orchestra_metrics(trainer):
    from toolorchestra.rl.tracking import StepMetrics

    tracker = StepMetrics("grpo/")
    trainer.add_callback(tracker)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "a step with non-zero advantages must update the weights"
    step = tracker.history[0]
    for key in ("loss", "orchestra/reward_mean", "orchestra/reward_std", "orchestra/accuracy",
                "orchestra/format_valid_rate", "orchestra/cost_mean", "orchestra/latency_mean",
                "orchestra/groups_filtered", "orchestra/frac_reward_zero_std", "orchestra/completions_masked",
                "frac_reward_zero_std", "tokens_per_s", "orchestra/rollout_s", "step_time"):
        assert key in step, key
    assert 0 < step["orchestra/rollout_s"] < step["step_time"]  # generation is part of the step
    assert step["orchestra/accuracy"] == 0.5 and step["orchestra/format_valid_rate"] == 0.75
    assert any(k.startswith("orchestra/calls/") for k in step)
    assert (Path(trainer.args.output_dir) / "checkpoint-1" / "trainer_state.json").is_file()


def test_prompt_rows_name_their_instance(instance):
    row = prompt_row(instance)
    assert row["prompt"][-1]["instance_id"] == instance.id == row["instance_id"]
    assert [m["content"] for m in row["prompt"]] == [m["content"] for m in instance.prompt]
    assert set(row["prompt"][0]) == set(row["prompt"][-1])  # one Arrow struct type for every message


def test_llamacpp_rollouts_feed_the_trainer_token_exact(tiny_dir, tiny_llm, make_env, instance, tmp_path):
    pytest.importorskip("llama_cpp")
    from toolorchestra.rl.llamacpp_rollouts import LlamaCppRollouts

    settings = GRPOSettings(steps=1, num_generations=4, max_completion_length=2048, rollout_engine="llamacpp")
    trainer = build_grpo_trainer(tiny_dir, tiny_llm.tokenizer, make_env(max_turns=2, max_tokens=12), [instance],
                                 settings, tmp_path / "grpo", use_cpu=True, seed=0)
    factory = trainer.orchestra_rollouts.policy_factory
    assert isinstance(factory, LlamaCppRollouts)
    out = trainer._generate_and_score_completions(generation_batch(trainer, 4))
    assert len(factory.export_s) == 1 and (tmp_path / "grpo" / "rollout-engine" / "policy.gguf").is_file()
    rollouts = trainer.orchestra_rollouts.last
    assert len(rollouts) == 4 and all(r.trajectory.turns or r.trajectory.messages for r in rollouts)
    assert out["completion_ids"].shape[0] == 4
    factory.close()


def test_a_stratified_grpo_step_deals_every_category(records_qa, tool_use, tmp_path):
    # Before, TRL shuffled the prompts, and a step of 8 drew whatever the pool's mix gave (about
    # half calculations): a step could hold no lookup at all and still move the lookups' routing.
    from toolorchestra.rl.sft import stratum
    from toolorchestra.rl.trl_backend import grpo_args, step_order

    _, qa, _, _ = records_qa
    pool = qa + tool_use
    categories = {stratum(i) for i in pool}
    assert categories >= {"tool_use", "arithmetic", "lookup", "count"}
    plain, stratified = GRPOSettings(), GRPOSettings(stratify=True)
    assert step_order(pool, plain, seed=0) == pool  # TRL shuffles it
    assert grpo_args(plain, tmp_path, use_cpu=True, seed=0, max_steps=1).shuffle_dataset
    order = step_order(pool, stratified, seed=0)
    assert sorted(i.id for i in order) == sorted(i.id for i in pool)  # every prompt, once
    assert {stratum(i) for i in order[:len(categories)]} == categories  # the first step holds them all
    assert step_order(pool, stratified, seed=0) == order != step_order(pool, stratified, seed=1)
    assert not grpo_args(stratified, tmp_path, use_cpu=True, seed=0, max_steps=1).shuffle_dataset  # TRL keeps it
