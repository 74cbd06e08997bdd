"""The llama.cpp engine against the transformers engine: GGUF conversion of a checkpoint, identical
greedy replies and usage on a fixed prompt set, lockstep batches, KV reuse across calls, and clear
conversion errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.base import LLMError
from toolorchestra.llm.gguf_export import ensure_gguf
from toolorchestra.llm.llamacpp import LlamaCppLLM
from toolorchestra.llm.local import LocalLLM

TOOLS = [{"type": "function", "function": {
    "name": "answer", "description": "Ask an expert model to answer the question.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}}}]
PROMPTS = [
    [{"role": "user", "content": "What is 2 + 3? Answer briefly."}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "system", "content": "You route questions to tools."},
     {"role": "user", "content": "Who wrote the book with id B-12?"},
     {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "answer",
                                                                       "arguments": {"question": "B-12"}}}]},
     {"role": "tool", "content": "Ada Lovelace"}],
]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory, smollm2_dir: Path) -> Path:
    """A random-weight Llama of SmolLM2's architecture with the real tokenizer, saved as a checkpoint."""
    import torch
    from helpers.tiny_models import tiny_llama
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny-checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = tiny_llama(tokenizer)
    with torch.no_grad():  # wider weights than the default init: varied tokens, not one repeated newline
        for name, param in model.named_parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def engines(tiny_folder: Path, tmp_path_factory):
    cache = tmp_path_factory.mktemp("models")
    gguf = ensure_gguf(tiny_folder, cache, weights="f32")
    return LocalLLM(tiny_folder, device="cpu"), LlamaCppLLM(gguf, tiny_folder, n_ctx=2048), gguf, cache


def _replies(llm, tools=None, max_tokens=12):
    return [(c.text, c.usage.prompt_tokens, c.usage.completion_tokens)
            for c in (llm.chat(m, tools=tools, max_tokens=max_tokens) for m in PROMPTS)]


def test_converted_checkpoint_replies_like_transformers(engines):
    local, engine, _, _ = engines
    assert engine.render(PROMPTS[2], TOOLS) == local.render(PROMPTS[2], TOOLS)
    for tools in (None, TOOLS):
        expected = _replies(local, tools)
        assert _replies(engine, tools) == expected
        assert all(new > 1 and len(set(text)) > 3 for text, _, new in expected)  # varied text, several steps


def test_batch_keeps_row_order_and_matches_single_calls(engines):
    _, engine, _, _ = engines
    batch = engine.chat_batch(PROMPTS, tools=TOOLS, max_tokens=10)
    singles = [engine.chat(m, tools=TOOLS, max_tokens=10) for m in PROMPTS]
    assert [c.text for c in batch] == [c.text for c in singles]
    assert [c.usage for c in batch] == [c.usage for c in singles]


def test_a_stop_string_ends_the_reply_before_it_in_both_engines(engines):
    local, engine, _, _ = engines
    full = local.chat(PROMPTS[0], max_tokens=16)
    # a stop string taken from the middle of the greedy reply: both engines end there, leave it out
    # and count only the tokens generated up to it
    words = full.text.split()
    assert len(words) >= 3, full.text
    stop = words[len(words) // 2]
    want = full.text[:full.text.find(stop)].strip()
    for llm in (local, engine):
        cut = llm.chat(PROMPTS[0], max_tokens=16, stop=["never-generated", stop])
        assert cut.text == want and cut.finish_reason == "stop"
        assert cut.usage.completion_tokens < full.usage.completion_tokens
    assert engine.chat(PROMPTS[0], max_tokens=16, stop=["never-generated"]).text == full.text
    [batched] = engine.chat_batch([PROMPTS[0]], max_tokens=16, stop=[stop])
    assert batched.text == want


def test_live_sequences_reuse_turns_without_changing_replies(tiny_folder, engines):
    _, _, gguf, _ = engines
    engine = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    first = engine.chat_batch(PROMPTS[:2], tools=TOOLS, max_tokens=8)
    # Each chat's next turn, after the other chat ran in between: its previous turn is still live.
    follow = [m + [{"role": "assistant", "content": c.text}, {"role": "user", "content": "And then?"}]
              for m, c in zip(PROMPTS[:2], first, strict=True)]
    other = engine.chat(PROMPTS[2], tools=TOOLS, max_tokens=8)
    encoded_before = engine.prompt_tokens_encoded
    again = [engine.chat(m, tools=TOOLS, max_tokens=8) for m in follow]
    encoded = engine.prompt_tokens_encoded - encoded_before
    assert encoded < sum(c.usage.prompt_tokens for c in again) / 4  # most of each prompt was live
    # ... and each reply says how much of its prompt came from the cache
    assert sum(c.usage.prompt_tokens - c.usage.cached_prompt_tokens for c in again) == encoded
    fresh = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    cold = [fresh.chat(m, tools=TOOLS, max_tokens=8) for m in follow]
    assert [c.text for c in again] == [c.text for c in cold]
    assert cold[0].usage.cached_prompt_tokens == 0 < cold[1].usage.cached_prompt_tokens  # a cold start computes all
    assert other.text == fresh.chat(PROMPTS[2], tools=TOOLS, max_tokens=8).text


def test_rows_starting_together_read_their_prompts_in_shared_decodes(tiny_folder, engines):
    """Chunked prefill: rows with one long system prompt wait for the first to read it, then read only
    their own suffixes, together in one decode beside its first generated token; replies unchanged."""
    _, engine, gguf, _ = engines
    system = "You are a careful assistant who answers in one word. " * 12
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": f"Question {i}: name a colour."}]
             for i in range(4)]
    fresh = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    sizes: list[int] = []
    decode = fresh._decode
    fresh._decode = lambda entries, pinned: (sizes.append(len(entries)), decode(entries, pinned))  # type: ignore[method-assign]
    replies = fresh.chat_batch(chats, max_tokens=4)
    assert [c.text for c in replies] == [engine.chat(c, max_tokens=4).text for c in chats]
    prompt_tokens = sum(c.usage.prompt_tokens for c in replies)
    assert fresh.prompt_tokens_encoded < prompt_tokens / 2  # the system prompt was read once
    # one decode for the first prompt, one for the three suffixes (+ a generated token), then one per
    # new token: not one decode per prompt
    assert len(sizes) <= 4 + 1 and sizes[1] > 3


def test_a_full_kv_cache_evicts_old_sequences_and_replies_stay_the_same(tiny_folder, engines):
    """More live tokens than KV cells: least recently used sequences are dropped, not an error."""
    _, engine, gguf, _ = engines
    small = LlamaCppLLM(gguf, tiny_folder, n_ctx=1024, n_parallel=2)
    questions = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}? " + "Explain. " * 20}]
                 for i in range(8)]
    replies = small.chat_batch(questions, tools=TOOLS, max_tokens=6)
    assert sum(c.usage.prompt_tokens for c in replies) > 1024  # they did not all fit at once
    assert [c.text for c in replies] == [engine.chat(q, tools=TOOLS, max_tokens=6).text for q in questions]
    with pytest.raises(LLMError, match="exceeds the context"):
        small.chat([{"role": "user", "content": "word " * 1100}], max_tokens=4)


def test_running_rows_that_outgrow_the_kv_cache_are_preempted_not_an_error(tiny_folder, engines):
    """Rows whose prompts fit one by one but not all at once: the row started last gives its cells back
    and restarts once another has finished (recompute preemption), with the same greedy reply, and
    the engine serves the next call as before."""
    _, engine, gguf, _ = engines
    small = LlamaCppLLM(gguf, tiny_folder, n_ctx=512, n_parallel=4)
    questions = [[{"role": "user", "content": f"Question {i}: what is {i} + {i}? " + f"Detail {i}. " * 40}]
                 for i in range(4)]
    replies = small.chat_batch(questions, max_tokens=6)
    assert min(c.usage.prompt_tokens for c in replies) > 512 / 4  # four at once cannot fit
    assert small.rows_preempted > 0
    assert [c.text for c in replies] == [engine.chat(q, max_tokens=6).text for q in questions]
    assert [c.text for c in small.chat_batch(questions, max_tokens=6)] == [c.text for c in replies]


def test_rows_sampled_together_follow_their_own_seeds(tiny_folder, engines):
    """Lockstep sampling: a row's tokens depend on its prompt and seed, not on its batch neighbours."""
    _, engine, _, _ = engines
    # From an empty cache: how much of the prompt a live sequence already holds changes which decodes
    # read it, and at temperature 1 a random model's near-uniform tokens follow last-bit differences.
    engine.reset()
    prompt = engine.tokenizer(engine.render(PROMPTS[1]), add_special_tokens=False)["input_ids"]
    together = engine.generate_many([prompt] * 3, max_tokens=10, temperature=1.0, stop_texts=[()] * 3,
                                    seeds=[1, 2, 1])
    alone = engine.generate_many([prompt], max_tokens=10, temperature=1.0, stop_texts=[()], seeds=[2])
    assert together[0][0] == together[2][0] != together[1][0]
    assert together[1][0] == alone[0][0]


def test_conversion_is_cached_by_weights_hash(tiny_folder, engines, tmp_path):
    _, _, gguf, cache = engines
    stamp = gguf.stat().st_mtime_ns
    assert ensure_gguf(tiny_folder, cache, weights="f32") == gguf
    assert gguf.stat().st_mtime_ns == stamp  # not converted again
    import shutil

    from safetensors.torch import load_file, save_file

    changed = tmp_path / "changed"
    shutil.copytree(tiny_folder, changed)
    tensors = load_file(changed / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * 2
    save_file(tensors, changed / "model.safetensors", metadata={"format": "pt"})
    assert ensure_gguf(changed, cache, weights="f32") != gguf


def test_bf16_weights_keep_matrices_in_bf16_and_reply(tiny_folder, engines, tmp_path):
    """`weights="bf16"` (for CPUs with AVX512_BF16 kernels): matrices stored as BF16, vectors f32, and
    the engine loads and replies (not necessarily the f32 text: bf16 rounds the weights)."""
    import gguf as gguf_lib

    path = ensure_gguf(tiny_folder, tmp_path, weights="bf16")
    types = {t.name: t.tensor_type for t in gguf_lib.GGUFReader(path).tensors}
    assert types["blk.0.attn_q.weight"] == gguf_lib.GGMLQuantizationType.BF16
    assert types["blk.0.attn_norm.weight"] == gguf_lib.GGMLQuantizationType.F32
    reply = LlamaCppLLM(path, tiny_folder, n_ctx=512).chat(PROMPTS[0], max_tokens=6)
    assert reply.usage.completion_tokens > 0 and reply.text


def test_unsupported_architecture_is_one_error_naming_the_file(tiny_folder, tmp_path):
    import shutil

    folder = tmp_path / "gpt2"
    shutil.copytree(tiny_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConfigError, match="unsupported architecture 'GPT2LMHeadModel'") as info:
        ensure_gguf(folder, tmp_path / "cache")
    assert info.value.file == str(folder / "config.json")


def test_corrupt_checkpoint_is_one_error_naming_the_file(tiny_folder, tmp_path):
    import shutil

    folder = tmp_path / "corrupt"
    shutil.copytree(tiny_folder, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated download
    with pytest.raises(ConfigError, match="corrupt checkpoint weights") as info:
        ensure_gguf(folder, tmp_path / "cache")
    assert info.value.file == str(weights)
    assert not list((tmp_path / "cache" / "gguf").glob("*.gguf"))  # nothing half-written is cached


def test_a_broken_gguf_is_a_config_error(tiny_folder, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(ConfigError, match="llama.cpp cannot load"):
        LlamaCppLLM(bad, tiny_folder)


@pytest.mark.slow
def test_real_smollm2_converted_replies_like_transformers(smollm2_dir):
    """The real SmolLM2-135M: its transformers folder converted to GGUF (f32, like with like) gives
    the transformers engine's greedy replies on the fixed prompt set."""
    local = LocalLLM(smollm2_dir, device="cpu")
    # Cached beside the converted folder (the repo's state folder), as a user's first run does.
    engine = LlamaCppLLM(ensure_gguf(smollm2_dir, smollm2_dir.parent, weights="f32"), smollm2_dir)
    for tools in (None, TOOLS):
        assert _replies(engine, tools, max_tokens=24) == _replies(local, tools, max_tokens=24)


def test_engine_is_configuration(tiny_folder, tmp_path):
    """`kind: llamacpp` in a catalog and a stage's `engine` pick the engine; endpoints are untouched."""
    from pydantic import TypeAdapter

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.config import (
        LlamaCppLLMConfig,
        LLMConfig,
        LocalLLMConfig,
        OpenAILLMConfig,
        as_engine,
        build_llm,
        on_engine,
    )

    parsed = TypeAdapter(LLMConfig).validate_python({"kind": "llamacpp", "model": str(tiny_folder), "weights": "f32"})
    assert isinstance(parsed, LlamaCppLLMConfig)
    assert on_engine(LocalLLMConfig(model="m"), "llamacpp") == LlamaCppLLMConfig(model="m")
    assert on_engine(LlamaCppLLMConfig(model="m"), "transformers") == LocalLLMConfig(model="m")
    assert on_engine(LocalLLMConfig(model="m"), None) == LocalLLMConfig(model="m")
    endpoint = OpenAILLMConfig(model="gpt")
    assert on_engine(endpoint, "llamacpp") is endpoint
    settings = Settings(workspace=tmp_path)
    llm = build_llm(parsed, settings)
    assert isinstance(llm, LlamaCppLLM)
    assert list((settings.models_cache / "gguf").glob("*-f32-*.gguf"))
    local = LocalLLM(tiny_folder, device="cpu")
    moved = as_engine(local, "llamacpp", settings, weights="f32")
    assert isinstance(moved, LlamaCppLLM) and moved.model == local.model
    assert moved.chat(PROMPTS[0], max_tokens=6).text == local.chat(PROMPTS[0], max_tokens=6).text
    assert as_engine(local, "transformers", settings) is local


def test_auto_engine_is_llamacpp_on_a_cpu_and_transformers_on_a_gpu(monkeypatch):
    import torch

    from toolorchestra.llm.config import pick_engine

    assert [pick_engine(e) for e in ("transformers", "llamacpp")] == ["transformers", "llamacpp"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_engine("auto") == "llamacpp"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_engine("auto") == "transformers" and pick_engine("auto", "cpu") == "llamacpp"


def test_concurrent_calls_are_merged_and_each_gets_its_own_replies(tiny_folder, engines):
    """Threads calling one engine at once (an evaluation's concurrent expert calls) share batches;
    every caller still gets the replies a lone call would give."""
    from concurrent.futures import ThreadPoolExecutor

    _, engine, gguf, _ = engines
    expected = [engine.chat(m, tools=TOOLS, max_tokens=8).text for m in PROMPTS * 2]
    shared = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    drivers = []
    drive = shared._drive
    shared._drive = lambda own: (drivers.append(own), drive(own))  # type: ignore[method-assign]
    with ThreadPoolExecutor(max_workers=6) as pool:
        replies = list(pool.map(lambda m: shared.chat(m, tools=TOOLS, max_tokens=8).text, PROMPTS * 2))
    assert replies == expected
    # some calls ran in another caller's batch: merged while waiting, or joined a running one
    assert shared.tickets_joined > 0 and len({id(t) for t in drivers}) < 6
    assert not (shared._active or shared._queue or shared._owner or shared._pinned)
    with pytest.raises(LLMError, match="exceeds the context"):  # a bad row fails its own caller only
        shared.chat([{"role": "user", "content": "word " * 2100}], max_tokens=4)
    assert shared.chat(PROMPTS[0], tools=TOOLS, max_tokens=8).text == expected[0]


def test_a_call_arriving_mid_batch_joins_it_at_the_next_step(tiny_folder, engines):
    """Continuous batching: a call made while a long generation runs is decoded with it (not after
    it), returns before it, and replies as it would alone."""
    import threading

    _, engine, gguf, _ = engines
    long_alone = engine.chat(PROMPTS[0], max_tokens=40)
    short_alone = engine.chat(PROMPTS[1], max_tokens=4)
    assert long_alone.usage.completion_tokens > 8  # long enough that the short call can finish inside it
    shared = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    steps: list[int] = []
    decode = shared._decode
    late: dict = {}

    def traced(entries, pinned):
        steps.append(len(entries))
        if len(steps) == 3:  # the long call is decoding: the short one arrives now
            late["thread"] = threading.Thread(target=lambda: late.setdefault(
                "reply", (shared.chat(PROMPTS[1], max_tokens=4), len(steps))))
            late["thread"].start()
            while not shared._waiting:  # it is queued (and will be admitted at the next step)
                threading.Event().wait(0.001)
        decode(entries, pinned)

    shared._decode = traced  # type: ignore[method-assign]
    reply = shared.chat(PROMPTS[0], max_tokens=40)
    late["thread"].join(timeout=30)
    short, returned_at = late["reply"]
    def tokens(c):  # cache hits depend on what the engine ran before; the tokens must not
        return c.usage.prompt_tokens, c.usage.completion_tokens

    assert (reply.text, tokens(reply)) == (long_alone.text, tokens(long_alone))
    assert (short.text, tokens(short)) == (short_alone.text, tokens(short_alone))
    assert shared.tickets_joined == 1
    assert 2 in steps[3:]  # decode steps with both rows
    assert returned_at < len(steps)  # the short call returned while the long one was still decoding


def test_a_caller_returns_when_its_rows_are_done_and_the_next_one_drives_the_rest(tiny_folder, engines):
    """A caller drives the engine only until its own rows are finished: a short call that started a
    batch returns while a longer call that joined it is still decoding, and that call's own thread
    decodes the rest (an episode's next turn does not wait for other episodes' replies)."""
    import threading

    _, engine, gguf, _ = engines
    long_alone = engine.chat(PROMPTS[0], max_tokens=40)
    short_alone = engine.chat(PROMPTS[1], max_tokens=4)
    assert long_alone.usage.completion_tokens > 8
    shared = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    steps: list[str] = []
    drivers: list[str] = []
    decode, drive = shared._decode, shared._drive
    late: dict = {}

    def traced(entries, pinned):
        steps.append(threading.current_thread().name)
        if len(steps) == 2:  # the short call is decoding: the long one arrives now
            late["thread"] = threading.Thread(name="long", target=lambda: late.setdefault(
                "reply", shared.chat(PROMPTS[0], max_tokens=40)))
            late["thread"].start()
            while not shared._waiting:
                threading.Event().wait(0.001)
        decode(entries, pinned)

    shared._decode = traced  # type: ignore[method-assign]
    shared._drive = lambda own: (drivers.append(threading.current_thread().name), drive(own))  # type: ignore[method-assign]
    short = shared.chat(PROMPTS[1], max_tokens=4)
    returned_at = len(steps)
    late["thread"].join(timeout=30)
    assert short.text == short_alone.text and late["reply"].text == long_alone.text
    assert returned_at < len(steps)  # the short call did not wait for the long one
    assert "long" in steps[returned_at:] and set(steps[returned_at:]) == {"long"}  # its own thread drove it
    assert drivers[0] != "long" and "long" in drivers
    assert not (shared._active or shared._queue or shared._owner)


def test_a_failed_decode_fails_every_caller_in_the_batch_and_the_engine_goes_on(tiny_folder, engines):
    """A decode error reaches every caller with rows in the running batch (not only the caller whose
    thread ran the step), and the engine is empty and usable afterwards."""
    import threading

    _, engine, gguf, _ = engines
    expected = engine.chat(PROMPTS[2], max_tokens=6).text
    shared = LlamaCppLLM(gguf, tiny_folder, n_ctx=2048)
    decode = shared._decode
    steps: list[int] = []
    errors: dict[str, BaseException] = {}

    def failing(entries, pinned):
        steps.append(len(entries))
        if len(steps) == 2:
            late = threading.Thread(target=lambda: _catch(errors, "late", lambda: shared.chat(PROMPTS[1], max_tokens=30)))
            late.start()
            errors["thread"] = late  # type: ignore[assignment]
            while not shared._waiting:
                threading.Event().wait(0.001)
        if len(steps) == 4:
            raise LLMError("llama.cpp decode failed (code -3)")
        decode(entries, pinned)

    shared._decode = failing  # type: ignore[method-assign]
    _catch(errors, "first", lambda: shared.chat(PROMPTS[0], max_tokens=30))
    errors.pop("thread").join(timeout=30)  # type: ignore[attr-defined]
    assert {k: str(e) for k, e in errors.items()} == {"first": "llama.cpp decode failed (code -3)",
                                                     "late": "llama.cpp decode failed (code -3)"}
    assert not (shared._active or shared._queue or shared._owner or shared._pinned)
    shared._decode = decode  # type: ignore[method-assign]
    assert shared.chat(PROMPTS[2], max_tokens=6).text == expected


def _catch(errors: dict, key: str, call) -> None:
    try:
        call()
    except LLMError as exc:
        errors[key] = exc


BUILT_AVX512 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | "


def test_a_build_with_kernels_the_cpu_lacks_is_refused_with_how_to_rebuild():
    from toolorchestra.core.errors import OrchestraError
    from toolorchestra.llm.llamacpp import built_features, check_cpu_features

    built = built_features(BUILT_AVX512)
    assert built == ["AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VNNI"]
    avx2_cpu = {"avx", "avx2", "f16c", "fma", "bmi2", "sse3"}
    with pytest.raises(OrchestraError, match=r"AVX512, AVX512_VNNI kernels that this CPU lacks.*make rebuild-llama"):
        check_cpu_features(built, avx2_cpu)
    check_cpu_features(built, avx2_cpu | {"avx512f", "avx512_vnni"})  # an AVX512 CPU runs it
    avx2_build = BUILT_AVX512.replace("AVX512 = 1", "AVX512 = 0").replace("_VNNI = 1", "_VNNI = 0")
    check_cpu_features(built_features(avx2_build), avx2_cpu)
    check_cpu_features(built, None)  # no /proc/cpuinfo: nothing to compare with


def test_this_machines_llamacpp_build_runs_on_its_cpu():
    from toolorchestra.llm.llamacpp import _cpu_flags, built_features, check_cpu_features

    check_cpu_features(built_features(), _cpu_flags())


def test_the_engine_loads_the_tokenizer_auto_tokenizer_would(tiny_folder: Path, tmp_path: Path):
    """`load_tokenizer` skips AutoTokenizer's import (seconds of every `orchestra ask`), never its
    result: the same class, chat template and token ids; a folder without tokenizer.json falls back."""
    from transformers import AutoTokenizer

    from toolorchestra.llm.llamacpp import load_tokenizer

    fast, auto = load_tokenizer(tiny_folder), AutoTokenizer.from_pretrained(tiny_folder)
    assert type(fast) is type(auto)
    for messages in PROMPTS:
        text = fast.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        assert text == auto.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
        assert fast(text)["input_ids"] == auto(text)["input_ids"]
    assert (fast.eos_token, fast.all_special_ids) == (auto.eos_token, auto.all_special_ids)
    with pytest.raises((OSError, ValueError)):  # no tokenizer files at all: AutoTokenizer's own error
        load_tokenizer(tmp_path)
