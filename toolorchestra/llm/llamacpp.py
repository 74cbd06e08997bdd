"""A GGUF model through llama.cpp (`llama-cpp-python`'s C API) as a chat backend: fixed-weight work on
the CPU, many sequences decoded together.

Same contract as the transformers engine (`local.LocalLLM`), so an episode cannot tell them apart:
the prompt is rendered by the same tools-aware chat template and tokenized by the checkpoint's own
transformers tokenizer (identical token ids in both engines), replies are decoded by it, a turn
stops at `<|im_end|>`/eos or right after a complete `</tool_call>` (decoded over the last few new
tokens, as `StopAfterText` does) or at a caller's `stop` string (left out of the reply), and
`usage` counts the prompt's tokens and the new ones up to and including the stop token.

Why the C API and not `Llama.generate`: the high-level class holds one sequence per context, so a
batch of N chats costs N times one chat. One `llama_decode` over N sequences' next tokens reads the
weights once for all of them: rows of a `chat_batch` are decoded in lockstep, `n_parallel` at a
time (on a 2-core AVX2 build, 8 rows took 74 ms a step against 27 ms for one; past a few rows the
step is compute-bound, so batching gives up to ~4x, not N).
Prompts are decoded in chunks beside the generating rows (chunked prefill, as llama.cpp's server
batches its slots): one `llama_decode` holds the next token of every generating row and then up to
`n_batch` prompt tokens of the rows still reading theirs. A decode of a few rows alone uses the
matrix kernels poorly (on a 2-core AVX512 build, ~10 ms per row-token against ~3 ms per prompt
token in a 512-token batch), so rows that start together are read in one or two decodes, not one
each. Rows sharing a long prefix with a row still reading it wait for it, then copy its cells.
Batching is continuous: a call from another thread (an evaluation's concurrent expert calls) joins
the batch that is running at its next step instead of waiting for it to end; before that, one
160-token program call that got the engine first ran alone while the others queued, and the
evaluation's decode steps averaged 2.8 rows.

Prefixes are never encoded twice: the context's KV cache is unified and keeps the sequences of
earlier calls (least recently used evicted when a decode finds no room). A new prompt starts from
the live sequence that shares its longest prefix (`llama_memory_seq_cp` shares those cells, it
does not copy them): the system prompt and tool schemas of a domain are encoded once, and an
episode's next turn encodes only the reply and observation that are new. Flash attention skips the
cells masked out for a sequence, but still walks them (see `N_CTX`). Rows that together outgrow the
cells are preempted (`_preempt`): the row started last restarts later from its prompt.

Threads: llama.cpp's workers spin-wait at every operation's barrier, so a thread more than the free
cores stalls them all; on the shared two-core machine 2 threads ran at 0.8 new tokens/s and 1 thread
at 19 (SmolLM2 f16, other jobs running). The default is 1; raise `n_threads` on an idle machine.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.llm.base import BatchLLM, Completion, LLMError, Message, Usage, cut_at_stop, tools_by_row
from toolorchestra.llm.gguf_export import GGUFWeights
from toolorchestra.llm.hermes import CLOSE

STOP_WINDOW = 8
"""New tokens decoded to look for `</tool_call>` or a stop string (as `local.StopAfterText`); at least
a stop string's length, so it always fits (a token is one character or more)."""
NO_KV_SLOT = 1
"""`llama_decode`'s return code when the KV cache has no room for the batch."""
_backend_lock = threading.Lock()
_backend_ready = False
_log_callback: Any = None
N_CTX = 16384
"""Default KV cells of an engine. Every decode's attention walks the cells up to the highest one in
use, masked or not, so old sequences kept for their prefixes slow every token; but fewer cells
re-read more prompts: at 8,192 the demo's evaluate stage took 1,374 s against 1,110 s here (the
trained and sft_only policies, 16 rows of ~1.4k-token prompts, 784 vs 536 s), while
`benchmarks/bench_eval.py --n-ctx 8192` (20 short episodes) ran 1.33x faster (docs/design.md).
Rows that outgrow the cells together are preempted, not an error."""
PREFIX_WAIT = 32
"""A queued row waits for a row still reading its prompt when that row will hold more than this many
more tokens of its prefix than any live sequence does."""
_POLL_S = 0.005
"""How often a caller waiting for the engine looks again (its rows may have joined a running batch)."""
_LOG_ERROR = 4
"""ggml's error level (llama-cpp-python's own log callback maps the levels of an older ggml, so it
prints warnings such as "n_ctx_seq > n_ctx_train", which a unified multi-sequence cache always has)."""


def _quiet_log(level: int, text: bytes, user_data: Any) -> None:
    if level == _LOG_ERROR:
        import sys

        print(text.decode("utf-8", "replace"), end="", file=sys.stderr, flush=True)


CPU_FEATURES = {"AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni",
                "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
                "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8"}
"""llama.cpp's name of a kernel family it was compiled with (`llama_print_system_info`) -> the
`/proc/cpuinfo` flag a CPU needs to run it."""


def built_features(system_info: str | None = None) -> list[str]:
    """The kernel families of `CPU_FEATURES` that llama.cpp was compiled with, from `system_info`
    (default: the installed library's), e.g. ["AVX", "AVX2", ..., "AVX512", "AVX512_VNNI"]."""
    if system_info is None:
        import llama_cpp

        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    on = {name for name, flag in (part.split("=", 1) for part in system_info.replace(" ", "").split("|") if "=" in part)
          if flag == "1"}
    return [name for name in CPU_FEATURES if name in on]


def load_tokenizer(folder: Path) -> Any:
    """The checkpoint's tokenizer. A folder with a `tokenizer.json` (every byte-level BPE model
    this engine runs) loads `PreTrainedTokenizerFast` directly, the class `AutoTokenizer` picks for
    it: importing `AutoTokenizer` pulls in transformers' model registry, about 3 s of every
    llama.cpp-only process (`orchestra ask` on a CPU) for nothing."""
    if (folder / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(folder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def check_cpu_features(built: list[str], cpu_flags: set[str] | None) -> None:
    """Refuse a llama.cpp build whose kernels (`built_features`) this CPU cannot run (a wheel built on
    another machine: the Makefile builds for the CPU it runs on), with how to rebuild, before the
    first decode dies of an illegal instruction. `cpu_flags` None (no /proc/cpuinfo) checks nothing."""
    if cpu_flags is None:
        return
    missing = [name for name in built if CPU_FEATURES[name] not in cpu_flags]
    if missing:
        raise OrchestraError(f"llama-cpp-python was built with {', '.join(missing)} kernels that this CPU lacks "
                             "(a wheel built on another machine?); rebuild it here: `make rebuild-llama` (or "
                             "`make rebuild-llama LLAMA_ISA=avx2` for a portable build)")


def _cpu_flags() -> set[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), None)
    return set(line.split(":", 1)[1].split()) if line else None


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix: a binary search over slice comparisons, which run in C
    (the scheduler compares prompts of thousands of tokens at every step)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class _KVFull(LLMError):
    """The KV cache is full of the cells of rows being generated (nothing left to evict)."""


class Generated(NamedTuple):
    """One prompt's generation: new tokens up to and including the stop token, why it stopped, the
    seconds it took and how many prompt tokens came from the prefix cache."""

    new: list[int]
    finish: str
    seconds: float
    cached: int


@dataclass
class _Row:
    """One prompt being generated: its sequence in the KV cache, sampler and new tokens."""

    prompt: list[int]
    stop_texts: tuple[str, ...]
    """The row ends once its new text contains one of these (`</tool_call>` when tools are offered)."""
    max_tokens: int
    temperature: float
    seed: int | None
    seq: int = -1
    cached: int = 0
    """Prompt tokens copied from a live sequence's KV cells, not decoded (the cache hit its usage reports)."""
    cursor: int = 0
    """Prompt tokens in the row's KV cells so far (a prompt is decoded in chunks, with other rows)."""
    sampler: Any = None
    new: list[int] = field(default_factory=list)
    finish: str | None = None
    seconds: float = 0.0
    started: float = 0.0

    @property
    def window(self) -> int:
        return max([STOP_WINDOW, *(len(t) for t in self.stop_texts)])


@dataclass
class _Ticket:
    """One caller's rows, waiting for the engine."""

    rows: list[_Row]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class LlamaCppLLM(BatchLLM):
    """Chat over a GGUF file, with the transformers tokenizer (and chat template) `tokenizer`: a folder or a loaded one.

    `n_ctx`: KV cells shared by all sequences (one sequence may use them all); `n_parallel`: rows
    decoded together; `n_batch`: prompt tokens per decode."""

    def __init__(self, gguf_file: str | Path, tokenizer: str | Path | Any, *, name: str | None = None,
                 n_ctx: int = N_CTX, n_batch: int = 512, n_threads: int = 1, n_parallel: int = 16) -> None:
        import llama_cpp
        from llama_cpp import _internals

        self.gguf_file = gguf_file = Path(gguf_file)
        if not gguf_file.is_file():
            raise ConfigError(gguf_file, "GGUF file not found")
        if isinstance(tokenizer, (str, Path)):
            self.model = name or Path(tokenizer).name
            self.tokenizer = load_tokenizer(Path(tokenizer))
        else:  # an already loaded tokenizer
            self.model, self.tokenizer = name or gguf_file.stem, tokenizer
        self.device = "cpu"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._c = llama_cpp
        global _backend_ready, _log_callback
        with _backend_lock:
            if not _backend_ready:
                check_cpu_features(built_features(), _cpu_flags())
                _log_callback = llama_cpp.llama_log_callback(_quiet_log)  # kept referenced: C holds it
                llama_cpp.llama_log_set(_log_callback, None)
                llama_cpp.llama_backend_init()
                _backend_ready = True
        self.n_ctx, self.n_batch, self.n_threads = n_ctx, n_batch, n_threads
        self.n_parallel = max(1, min(n_parallel, n_batch))
        # Live sequences from earlier calls are kept for their prefixes; beyond this many, the
        # least recently used one is dropped.
        self.n_seq_max = min(llama_cpp.llama_max_parallel_sequences(), 4 * self.n_parallel)
        try:
            self._model = _internals.LlamaModel(path_model=str(gguf_file), params=llama_cpp.llama_model_default_params(),
                                                verbose=False)
        except (ValueError, RuntimeError) as exc:  # llama.cpp reports a bad file as "Failed to load model"
            raise ConfigError(gguf_file, f"llama.cpp cannot load this GGUF: {exc}") from None
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_threads = params.n_threads_batch = n_threads
        params.n_seq_max, params.kv_unified = self.n_seq_max, True
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.no_perf = True
        self._ctx = _internals.LlamaContext(model=self._model, params=params, verbose=False)
        self.max_sequence = min(n_ctx, self._model.n_ctx_train() or n_ctx)
        """Tokens one sequence may hold: the context, and no more than the model was trained on."""
        self._batch = _internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        # Free the native objects before interpreter teardown: their finalizers otherwise run after
        # the ctypes bindings are gone and print a TypeError at exit.
        atexit.register(self.close)
        self._live: OrderedDict[int, list[int]] = OrderedDict()
        """Sequence id -> the tokens its KV cells hold, least recently used first."""
        self.stop_ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        self._lock = threading.Lock()  # the engine: one batch at a time
        self._waiting_lock = threading.Lock()
        self._waiting: list[_Ticket] = []
        # The running batch, kept between callers (see `_drive`); changed only under `_lock`.
        self._queue: list[_Row] = []
        """Admitted rows not started yet."""
        self._active: list[_Row] = []
        self._pinned: set[int] = set()
        """Sequences of running rows: never evicted."""
        self._owner: dict[int, _Ticket] = {}
        """id(row) -> its ticket, for every admitted unfinished row."""
        self._room = self.n_parallel
        """Rows running at once: fewer after a preemption, until a row finishes."""
        self.prompt_tokens_encoded = 0
        """Prompt tokens actually decoded (the rest came from a live sequence's prefix): for benchmarks."""
        self.tickets_joined = 0
        """Calls admitted into a batch already running (continuous batching): for tests and benchmarks."""
        self.rows_preempted = 0
        """Rows restarted because the KV cells could not hold every running row (see `_preempt`)."""

    @classmethod
    def from_local(cls, local: Any, cache_root: Path, *, weights: GGUFWeights = "f16", **kwargs: Any) -> LlamaCppLLM:
        """The model of a loaded `LocalLLM` (a checkpoint, a registered model) on llama.cpp, with its
        tokenizer; its GGUF is cached under `cache_root` by weights hash (a 135M model is saved in
        about a second to hash it; converting it the first time takes longer)."""
        import tempfile

        from toolorchestra.llm.gguf_export import ensure_gguf

        cache_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
            local.lm.save_pretrained(tmp, safe_serialization=True)
            local.tokenizer.save_pretrained(tmp)
            gguf = ensure_gguf(Path(tmp), cache_root, weights=weights)
        return cls(gguf, local.tokenizer, name=local.model, **kwargs)

    def close(self) -> None:
        """Free the context and model (idempotent)."""
        for part in ("_batch", "_ctx", "_model"):
            native = getattr(self, part, None)
            if native is not None:
                native.close()
                setattr(self, part, None)

    def reset(self) -> None:
        """Forget every live sequence (a benchmark's cold start)."""
        with self._lock:
            if self._active or self._queue:
                raise OrchestraError(f"{self.model}: cannot reset the engine while rows are being generated")
            self._c.llama_memory_clear(self._ctx.memory, True)
            self._live.clear()

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text the model sees, ending with the assistant header (as `LocalLLM.render`)."""
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )

    # KV bookkeeping -------------------------------------------------------------------------------

    def _drop(self, seq: int) -> None:
        self._c.llama_memory_seq_rm(self._ctx.memory, seq, -1, -1)
        del self._live[seq]

    def _evict_one(self, pinned: set[int]) -> bool:
        victim = next((s for s in self._live if s not in pinned), None)
        if victim is None:
            return False
        self._drop(victim)
        return True

    def _place(self, row: _Row, pinned: set[int]) -> None:
        """Give `row` a sequence holding the longest prefix of its prompt that a live one has (at
        least the last prompt token is left to decode: its logits start the reply)."""
        donor, shared = -1, 0
        for seq, tokens in self._live.items():
            n = common_prefix(tokens, row.prompt)
            if n > shared:
                donor, shared = seq, n
        keep = min(shared, len(row.prompt) - 1)
        while len(self._live) >= self.n_seq_max:
            if not self._evict_one(pinned | {donor}):
                raise LLMError(f"{self.model}: more rows than llama.cpp sequences ({self.n_seq_max})")
        row.seq = min(set(range(self.n_seq_max)) - self._live.keys())
        if keep > 0:
            self._c.llama_memory_seq_cp(self._ctx.memory, donor, row.seq, 0, keep)
        self._live[row.seq] = row.prompt[:keep]
        row.cached = keep
        pinned.add(row.seq)
        if donor >= 0 and donor not in pinned and shared == len(self._live[donor]):
            self._drop(donor)  # all it held is a prefix of the new sequence: nothing left to share
        self.prompt_tokens_encoded += len(row.prompt) - keep

    def _decode(self, entries: list[tuple[int, int, int, bool]], pinned: set[int]) -> None:
        """One `llama_decode` of (token, position, sequence, wants logits) entries; when the KV cache
        is full, drop least recently used sequences outside `pinned` and try again."""
        batch = self._batch.batch
        batch.n_tokens = len(entries)
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        while True:
            code = self._c.llama_decode(self._ctx.ctx, batch)
            if code == 0:
                return
            if code != NO_KV_SLOT:
                raise LLMError(f"llama.cpp decode with {self.model} failed (code {code})")
            if not self._evict_one(pinned):
                raise _KVFull(f"{self.model}: the {self.n_ctx} KV cells cannot hold the rows being generated "
                              "(raise n_ctx)")

    def _sampler(self, temperature: float, seed: int | None) -> Any:
        c = self._c
        chain = c.llama_sampler_chain_init(c.llama_sampler_chain_default_params())
        if temperature > 0:
            c.llama_sampler_chain_add(chain, c.llama_sampler_init_temp(temperature))
            c.llama_sampler_chain_add(chain, c.llama_sampler_init_dist(c.LLAMA_DEFAULT_SEED if seed is None else seed))
        else:
            c.llama_sampler_chain_add(chain, c.llama_sampler_init_greedy())
        return chain

    def _take(self, row: _Row, index: int) -> None:
        """Sample `row`'s next token from the logits at batch `index` and decide whether it stops."""
        token = int(self._c.llama_sampler_sample(row.sampler, self._ctx.ctx, index))
        row.new.append(token)
        if token in self.stop_ids:
            row.finish = "stop"
        elif row.stop_texts and self._at_stop_text(row):
            row.finish = "stop"
        elif len(row.new) >= row.max_tokens:
            row.finish = "length"
        if row.finish is not None:
            row.seconds = time.perf_counter() - row.started

    def _at_stop_text(self, row: _Row) -> bool:
        """Whether `row`'s last new tokens contain one of its stop texts (decoded once for all)."""
        tail = self.tokenizer.decode(row.new[-row.window:], skip_special_tokens=True)
        return any(text in tail for text in row.stop_texts)

    def _start(self, row: _Row, pinned: set[int]) -> None:
        """Put `row` in a sequence holding the longest live prefix of its prompt; the rest of the
        prompt is decoded by the next steps, in chunks beside the other rows."""
        row.started = time.perf_counter()
        row.sampler = self._sampler(row.temperature, row.seed)
        self._place(row, pinned)
        row.cursor = len(self._live[row.seq])

    def _waits_for_prefix(self, row: _Row, active: list[_Row]) -> bool:
        """Whether `row` should start later: a row still decoding its prompt will soon hold a longer
        prefix of it than any live sequence does (rows of one domain share a long system prompt;
        started together, each would encode it)."""
        filling = [r.prompt for r in active if r.cursor < len(r.prompt)]
        if not filling:
            return False
        soon = max(common_prefix(p, row.prompt) for p in filling)
        if soon <= PREFIX_WAIT:
            return False
        now = max((common_prefix(t, row.prompt) for t in self._live.values()), default=0)
        return soon > now + PREFIX_WAIT

    def _step(self, active: list[_Row], pinned: set[int]) -> None:
        """One `llama_decode`: the next token of every row that is generating, then prompt chunks
        of the rows still reading their prompts, up to `n_batch` tokens (chunked prefill, as
        llama.cpp's server batches its slots: a decode step of a few rows alone uses the matrix
        kernels poorly); then each row with logits samples its next token."""
        entries: list[tuple[int, int, int, bool]] = []
        sampled: list[tuple[_Row, int]] = []
        chunks: list[tuple[_Row, list[int]]] = []
        for row in active:
            if row.cursor == len(row.prompt):
                sampled.append((row, len(entries)))
                entries.append((row.new[-1], len(self._live[row.seq]), row.seq, True))
        budget = self.n_batch - len(entries)
        for row in active:
            if budget <= 0:
                break
            if row.cursor < len(row.prompt):
                chunk = row.prompt[row.cursor:row.cursor + budget]
                last = row.cursor + len(chunk) == len(row.prompt)
                entries.extend((t, row.cursor + j, row.seq, last and j == len(chunk) - 1) for j, t in enumerate(chunk))
                if last:
                    sampled.append((row, len(entries) - 1))
                chunks.append((row, chunk))
                budget -= len(chunk)
        self._decode(entries, pinned)
        for row, chunk in chunks:
            self._live[row.seq].extend(chunk)
            row.cursor += len(chunk)
        for row, index in sampled:
            if row.new:
                self._live[row.seq].append(row.new[-1])
            self._take(row, index)

    def _release(self, row: _Row, pinned: set[int]) -> None:
        """A finished row: its sampler freed, its sequence kept (most recently used) but evictable."""
        if row.sampler is not None:
            self._c.llama_sampler_free(row.sampler)
            row.sampler = None
        if row.seq in self._live:
            self._live.move_to_end(row.seq)
        pinned.discard(row.seq)

    def _preempt(self, row: _Row, pinned: set[int]) -> None:
        """Take `row` out of the batch and forget its progress: its sequence and sampler freed (cells
        it shares with other sequences stay theirs), to be started again from its prompt."""
        self._release(row, pinned)
        if row.seq in self._live:
            self._drop(row.seq)
        row.seq, row.cursor, row.new = -1, 0, []
        self.rows_preempted += 1

    def generate_many(self, prompts: list[list[int]], *, max_tokens: int, temperature: float,
                      stop_texts: list[tuple[str, ...]], seeds: list[int | None]) -> list[Generated]:
        """What each prompt generated (`Generated`), in prompt order.

        Continuous batching without an engine thread: the call queues its rows as one ticket, and
        while they are unfinished it either waits or, when the engine is free, drives it
        (`_drive`): each decode step admits the rows of tickets that arrived (calls from other
        threads: concurrent episodes, an evaluation's expert calls), so a call made while others
        run is decoded with them from the next step on. A caller stops driving as soon as its own
        rows are finished and returns; the rows of others stay in the engine and the next waiting
        caller drives them on (every unfinished row belongs to a caller still waiting)."""
        for prompt in prompts:
            if not prompt:
                raise LLMError(f"{self.model}: empty prompt")
            if len(prompt) + max_tokens > self.max_sequence:
                raise LLMError(f"{self.model}: prompt of {len(prompt)} tokens + {max_tokens} new exceeds "
                               f"the context of {self.max_sequence} tokens")
        rows = [_Row(prompt=list(p), stop_texts=tuple(stop), max_tokens=max_tokens, temperature=temperature, seed=seed)
                for p, stop, seed in zip(prompts, stop_texts, seeds, strict=True)]
        ticket = _Ticket(rows)
        with self._waiting_lock:
            self._waiting.append(ticket)
        while not ticket.done.is_set():
            if self._lock.acquire(blocking=False):
                try:
                    self._drive(ticket)
                finally:
                    self._lock.release()
            ticket.done.wait(_POLL_S)
        if ticket.error is not None:
            raise ticket.error
        return [Generated(r.new, r.finish or "length", r.seconds, r.cached) for r in rows]

    def _admit(self) -> None:
        """Queue the rows of the tickets that arrived, while fewer than `n_parallel` rows are running
        or queued: first come first started (a ticket's rows sorted by prompt, so rows sharing a
        prefix sit together and a row's donor is often the one before)."""
        if len(self._active) + len(self._queue) >= self.n_parallel:
            return
        with self._waiting_lock:
            arrived, self._waiting = self._waiting, []
        for ticket in arrived:
            if self._active or self._queue:
                self.tickets_joined += 1
            self._owner.update((id(row), ticket) for row in ticket.rows)
            self._queue.extend(sorted(ticket.rows, key=lambda r: r.prompt))

    def _drive(self, own: _Ticket) -> None:
        """Decode steps (the caller holds `_lock`) until `own`'s rows are finished: each step admits
        arrived tickets, starts queued rows while fewer than `_room` run, and decodes every running
        row (see `_step`); a finished row's ticket is done once all its rows are."""
        try:
            if self._ctx is None:
                raise LLMError(f"{self.model}: the llama.cpp engine is closed")
            while not own.done.is_set():
                self._admit()
                at = 0
                while at < len(self._queue) and len(self._active) < self._room:
                    if self._waits_for_prefix(self._queue[at], self._active):
                        at += 1
                        continue
                    row = self._queue.pop(at)
                    self._start(row, self._pinned)
                    self._active.append(row)
                if not self._active:
                    return  # own's rows are not admitted yet (only when another caller's step failed)
                try:
                    self._step(self._active, self._pinned)
                except _KVFull:
                    if len(self._active) == 1:
                        raise
                    # Recompute preemption (as vLLM's): the row started last gives its cells back and
                    # starts again once a row has finished; greedy, it replies the same.
                    victim = self._active.pop()
                    self._preempt(victim, self._pinned)
                    self._queue.insert(0, victim)
                    self._room = len(self._active)
                    continue
                done = [r for r in self._active if r.finish is not None]
                if done:
                    self._room = self.n_parallel
                    self._active = [r for r in self._active if r.finish is None]
                for row in done:
                    self._release(row, self._pinned)
                    ticket = self._owner.pop(id(row))
                    if all(r.finish is not None for r in ticket.rows):
                        ticket.done.set()
        except BaseException as exc:  # every caller with rows in the engine raises it, this one included
            self._fail(exc)
            if not own.done.is_set():  # its rows were still waiting: it raises too (a Ctrl-C is not lost)
                with self._waiting_lock:
                    if own in self._waiting:
                        self._waiting.remove(own)
                own.error = exc
                own.done.set()

    def _fail(self, exc: BaseException) -> None:
        """Give `exc` to every ticket with rows in the engine and empty it (its KV cells stay)."""
        tickets = {id(t): t for t in self._owner.values()}
        for row in self._active + self._queue:
            self._release(row, self._pinned)
        self._active, self._queue, self._owner = [], [], {}
        self._room = self.n_parallel
        for ticket in tickets.values():
            ticket.error = exc
            ticket.done.set()

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        if not batch:
            return []
        row_tools = tools_by_row(batch, tools, tools_per_row)
        prompts = [self.tokenizer(self.render(m, t), add_special_tokens=False)["input_ids"]
                   for m, t in zip(batch, row_tools, strict=True)]
        # Row i samples with seed + i: the rows of one prompt differ (self-consistency), repeatably.
        seeds = [None if seed is None else seed + i for i in range(len(batch))]
        extra = tuple(s for s in stop or () if s)
        done = self.generate_many(prompts, max_tokens=max_tokens, temperature=temperature,
                                  stop_texts=[((CLOSE,) if t else ()) + extra for t in row_tools], seeds=seeds)
        return [Completion(text=cut_at_stop(self.tokenizer.decode(new, skip_special_tokens=True), extra)[0].strip(),
                           usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(new), cached_prompt_tokens=cached),
                           latency_s=seconds, model=self.model, finish_reason=finish)
                for prompt, (new, finish, seconds, cached) in zip(prompts, done, strict=True)]
