"""An evaluation end to end with the tiny model as the orchestrator and scripted experts."""

from __future__ import annotations

import json
import re

import pytest
from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.core.errors import OrchestraError
from toolorchestra.episodes.environment import EpisodeConfig
from toolorchestra.evaluation import methods as m
from toolorchestra.evaluation.benchmarks import PreferenceSpec, QASpec, ToolScaleSpec, build_benchmarks
from toolorchestra.evaluation.judges import LLMJudge
from toolorchestra.evaluation.metrics import task_lists
from toolorchestra.evaluation.report import write_report
from toolorchestra.evaluation.runner import EvalConfig, evaluate, make_instance


@pytest.fixture(scope="module")
def benchmarks(eval_tasks, pairs):
    specs = [ToolScaleSpec(name="toolscale", max_tasks=2), QASpec(name="qa", max_tasks=2),
             PreferenceSpec(name="prefs", max_tasks=2)]
    return build_benchmarks(specs, tasks_root=eval_tasks, workspace=eval_tasks, seed=0, preference_pairs=pairs,
                            train_ids=set())


def _methods(catalog, tiny_llm, expert):
    """The trained policy, the prompted base, the expert alone and the random router."""
    return [m.orchestrator("trained", tiny_llm, policy_alias="smollm2", role="candidate"),
            m.orchestrator("prompted", ScriptedLLM("I think it is 7.", model="base"), policy_alias="smollm2"),
            *m.expert_methods(catalog, lambda alias: expert),
            m.random_router(catalog, seed=0, max_turns=2)]


@pytest.fixture(scope="module")
def run(benchmarks, catalog, tiny_llm, tmp_path_factory):
    from toolorchestra.core.settings import Settings

    root = tmp_path_factory.mktemp("eval-run")
    settings = Settings(workspace=root, state_dir=root / ".orchestra")
    expert = ScriptedLLM("42", model="smollm2")
    methods = _methods(catalog, tiny_llm, expert)
    judge = LLMJudge(ScriptedLLM("no", model="judge"))
    config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8), batch_size=4)
    return evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config, judge=judge,
                    llm_for=lambda alias: expert)


def test_baselines_and_orchestrator_run_identical_task_lists(run, benchmarks):
    lists = task_lists(run.records)
    assert set(lists) == {"trained", "prompted", "expert:smollm2", "random_router"}
    reference = lists["trained"]
    assert all(keys == reference for keys in lists.values())
    expected = {f"{i.key}#{v}" for b in benchmarks for i in b.items
                for v in (("instructed", "neutral") if i.preference else ("plain",))}
    assert set(reference) == expected and len(reference) == len(expected)


def test_records_carry_judgement_trajectory_and_accounting(run, catalog):
    by_method = {r.method: r for r in run.records if r.benchmark == "qa"}
    router = by_method["random_router"]
    assert router.tool_calls.get("ask_direct") == 1 and router.stop_reason == "answer_tool"
    assert router.cost_usd > 0 and router.judgement["method"] == "llm"  # rule failed ("42"), the judge said no
    assert router.trajectory["turns"][0]["tool"] == "ask_direct"
    expert = by_method["expert:smollm2"]
    assert "ask_direct" not in expert.offered_tools and "code_interpreter" in expert.offered_tools
    assert expert.cost_usd == pytest.approx((100 * 0.02 + 10 * 0.02) / 1e6)  # its own tokens at its price
    tool_use = [r for r in run.records if r.kind == "tool_use"]
    assert tool_use and all(r.judgement["method"] == "toolscale" and "db" in r.judgement["details"] for r in tool_use)
    prefs = [r for r in run.records if r.benchmark == "prefs" and r.method == "trained"]
    assert {r.variant for r in prefs} == {"instructed", "neutral"}
    instructed = next(r for r in prefs if r.variant == "instructed")
    assert instructed.preference and instructed.preference in instructed.trajectory["messages"][1]["content"]


def test_llm_judge_can_turn_a_failed_exact_match_into_a_pass(benchmarks, catalog, settings):
    expert = ScriptedLLM("something else entirely", model="smollm2")
    config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8))
    qa = [b for b in benchmarks if b.name == "qa"]
    router = [m.random_router(catalog, seed=0, max_turns=1)]
    strict = evaluate(router, qa, catalog=catalog, settings=settings, config=config, llm_for=lambda a: expert)
    lenient = evaluate(router, qa, catalog=catalog, settings=settings, config=config, llm_for=lambda a: expert,
                       judge=LLMJudge(ScriptedLLM("yes")))
    assert strict.summary["random_router"]["qa"].accuracy == 0.0
    assert lenient.summary["random_router"]["qa"].accuracy == 1.0
    assert lenient.summary["random_router"]["qa"].llm_judged == 2


def test_methods_evaluated_at_once_give_the_same_records_in_method_order(run, benchmarks, catalog, tiny_llm,
                                                                        tmp_path_factory):
    """`method_workers: 2` (two methods at once, the demo's setting) changes the wall time, not the
    records: same methods, tasks, verdicts and trajectories, in the serial run's order."""
    from toolorchestra.core.settings import Settings

    root = tmp_path_factory.mktemp("eval-run-parallel")
    settings = Settings(workspace=root, state_dir=root / ".orchestra")
    expert = ScriptedLLM("42", model="smollm2")
    methods = _methods(catalog, tiny_llm, expert)
    config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8), batch_size=4, method_workers=2)
    seen: list[str] = []
    parallel = evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config,
                        judge=LLMJudge(ScriptedLLM("no", model="judge")), llm_for=lambda alias: expert,
                        on_episode=lambda record: seen.append(record.method))

    def view(records):
        return [(r.method, r.key, r.variant, r.correct, r.tool_calls, r.trajectory["answer"]) for r in records]

    assert view(parallel.records) == view(run.records)
    assert sorted(seen) == sorted(r.method for r in run.records) and set(parallel.seconds) == set(run.seconds)


def test_identical_task_check_catches_a_divergent_method(run):
    import dataclasses

    broken = dataclasses.replace(run, records=[r for r in run.records
                                               if not (r.method == "prompted" and r.benchmark == "qa")])
    with pytest.raises(OrchestraError, match="identical task lists"):
        broken.check_identical_tasks()
    run.check_identical_tasks()


def test_instances_share_prompts_across_variants_except_the_preference(benchmarks, catalog):
    item = next(i for b in benchmarks for i in b.items if i.preference is not None)
    from toolorchestra.evaluation.runner import PromptConfig

    tools = [t.name for t in catalog.tools]
    with_pref = make_instance(item, catalog, tools, PromptConfig(), instructed=True, seed=0)
    neutral = make_instance(item, catalog, tools, PromptConfig(), instructed=False, seed=0)
    assert with_pref.id == neutral.id == item.key
    assert with_pref.prompt[0] == neutral.prompt[0]  # same system prompt and price sheet
    assert item.preference.instruction in with_pref.prompt[1]["content"]
    assert item.preference.instruction not in neutral.prompt[1]["content"]
    assert with_pref.catalog_tools == neutral.catalog_tools == tools


def test_report_files(run, tmp_path):
    files = write_report(run, tmp_path / "report", notes=["a note"], candidate="trained")
    metrics = json.loads(files["metrics"].read_text())
    assert metrics["candidate"] == "trained" and set(metrics["summary"]) == set(task_lists(run.records))
    assert metrics["labels"]["expert:smollm2"] == ["strongest", "cheapest"]
    assert files["pareto"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = files["report"].read_text()
    assert "| trained (candidate) |" in report and "a note" in report and run.fingerprint in report
    # intervals beside accuracy, and where each method's calls went (the router only calls
    # `ask_direct`, whose one model is smollm2)
    router = metrics["summary"]["random_router"]["overall"]
    assert router["accuracy_ci_low"] <= router["accuracy"] <= router["accuracy_ci_high"]
    assert router["model_share"] == {"smollm2": 1.0} and router["tool_share"] == {"ask_direct": 1.0}
    assert re.search(r"\| random_router \| [\d.]+ \| ask_direct 100% \(of \d+\) \| smollm2 100% \(of \d+\) \|", report)
    assert re.search(r"\d+\.\d% \[\d+\.\d, \d+\.\d\] / \$", report)
    per_task = [json.loads(line) for line in files["per_task"].read_text().splitlines()]
    assert len(per_task) == len(run.records) and all("judgement" in r and "trajectory" in r for r in per_task)
    table = json.loads(files["table"].read_text())
    assert {r["benchmark"] for r in table} == {"toolscale", "qa", "prefs", "overall"}


def test_each_method_worker_calls_its_own_catalog_models(benchmarks, catalog, tiny_llm, settings):
    """`llm_for_worker(k)`: worker k's tool calls (and an expert alone's own turns) reach worker k's
    backends, so two baselines that use only catalog models do not share one engine; the records
    are those of a run with one backend for all."""
    import threading

    def view(records):
        return [(r.method, r.key, r.variant, r.correct, r.tool_calls, r.trajectory["answer"]) for r in records]

    replicas = [ScriptedLLM("42", model="smollm2"), ScriptedLLM("42", model="smollm2")]
    asked: dict[int, set[str]] = {0: set(), 1: set()}
    lock = threading.Lock()

    def worker_models(k: int):
        def llm_for(alias: str):
            with lock:
                asked[k].add(threading.current_thread().name)
            return replicas[k]
        return llm_for

    methods = [*m.expert_methods(catalog, lambda alias: replicas[0]), m.random_router(catalog, seed=0, max_turns=2)]
    config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8), batch_size=4, method_workers=2)
    split = evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config,
                     llm_for=lambda alias: replicas[0], llm_for_worker=worker_models)
    one = evaluate(methods, benchmarks, catalog=catalog, settings=settings,
                   config=config.model_copy(update={"method_workers": 1}), llm_for=lambda alias: replicas[0])
    assert view(split.records) == view(one.records)
    assert asked[0] and asked[1]  # both workers' engines were used
    assert all(r.calls for r in replicas)


class _ThreadedPolicy(ScriptedLLM):
    """A policy that prefers concurrent episodes (as a remote endpoint): it asks the direct expert, and
    counts how many of its calls overlap and from which threads they come."""

    concurrent_episodes = True

    def __init__(self) -> None:
        import threading

        super().__init__(model="threaded")
        self.lock, self.now, self.most, self.threads = threading.Lock(), 0, 0, set()

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        import threading
        import time

        from toolorchestra.llm.base import Completion, Usage
        from toolorchestra.llm.hermes import format_tool_call

        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        time.sleep(0.05)  # long enough that the episodes' calls overlap when they can
        with self.lock:
            self.now -= 1
        question = next(str(m["content"]) for m in messages if m["role"] == "user")
        return Completion(text=format_tool_call("ask_direct", {"model": "smollm2", "question": question}),
                          usage=Usage(prompt_tokens=100, completion_tokens=10), latency_s=0.05, model=self.model)


def test_a_policy_that_prefers_concurrent_episodes_runs_each_episode_in_its_own_thread(benchmarks, catalog, settings):
    """`scheduling: auto` runs the episodes of a policy that prefers concurrent episodes (a remote
    endpoint, whose lockstep batch would be sequential requests) in `batch_size` threads at once; the
    records are lockstep's, in task order; a local engine's policy keeps lockstep unless told."""
    expert = ScriptedLLM("42", model="smollm2")

    def evaluated(policy, scheduling):
        config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8), batch_size=3, scheduling=scheduling)
        return evaluate([m.orchestrator("trained", policy, policy_alias="smollm2", role="candidate")], benchmarks,
                        catalog=catalog, settings=settings, config=config, llm_for=lambda alias: expert)

    def view(records):
        return [(r.key, r.variant, r.correct, r.tool_calls, r.trajectory["answer"]) for r in records]

    threaded, stepped = _ThreadedPolicy(), _SteppedPolicy()
    per_episode = evaluated(threaded, "auto")
    lockstep = evaluated(stepped, "auto")
    assert view(per_episode.records) == view(lockstep.records)
    assert all(set(r.tool_calls) == {"ask_direct"} for r in per_episode.records)
    assert threaded.most == 3 and all(t.startswith("orchestra-episode") for t in threaded.threads)
    assert stepped.most == 1 and len(stepped.threads) == 1  # one chat_batch per turn, from the method's thread
    forced = _SteppedPolicy()
    evaluated(forced, "per_episode")
    assert forced.most == 3


class _SteppedPolicy(_ThreadedPolicy):
    concurrent_episodes = False  # as the local engines
