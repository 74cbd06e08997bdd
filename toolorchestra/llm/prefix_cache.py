"""Saved llama.cpp KV states keyed by the tokens they hold: a prompt resumes from its longest cached
prefix instead of being encoded again.

An episode's next turn is its previous prompt + the reply + the tool's result, and every episode of
a domain opens with the same system prompt and tool schemas; the evaluation runs many episodes in
lockstep, so one context alternates between them. Saving each sequence's KV after a call and
restoring the longest matching one before the next turns those re-encodings into a memory copy.

llama-cpp-python's own `LlamaRAMCache` stores `Llama.save_state()`, which also copies the logits
buffer (`n_batch x n_vocab` floats: about 100 MB for SmolLM2 at `n_batch` 512) into every entry; this
stores only sequence 0's KV cells (`llama_state_seq_get_data`, about 23 KB per token for SmolLM2 at
f16), in a byte-bounded LRU.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any


def common_prefix(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """An LRU of (tokens -> sequence-0 KV bytes) for one `llama_cpp.Llama`, at most `capacity_bytes`."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def save(self, llm: Any) -> None:
        """Store what `llm`'s context holds now (its evaluated tokens)."""
        import llama_cpp

        tokens = tuple(int(t) for t in llm.input_ids[: llm.n_tokens])
        if not tokens or self.capacity_bytes <= 0:
            return
        size = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llm.ctx, buffer, size, 0)
        if written == 0 or written > self.capacity_bytes:
            return
        data = bytes(buffer)[:written]
        old = self._entries.pop(tokens, None)
        if old is not None:
            self._size -= len(old)
        # An entry whose tokens are a prefix of the new one is now redundant.
        for key in [k for k in self._entries if len(k) <= len(tokens) and tokens[: len(k)] == k]:
            self._size -= len(self._entries.pop(key))
        self._entries[tokens] = data
        self._size += len(data)
        while self._size > self.capacity_bytes and self._entries:
            self._size -= len(self._entries.popitem(last=False)[1])

    def restore_best(self, llm: Any, prompt: list[int]) -> int:
        """Load the cached state sharing the longest prefix with `prompt` when it beats what the
        context already holds; returns the prefix length the context now shares with `prompt`."""
        import llama_cpp

        current = common_prefix(llm.input_ids[: llm.n_tokens].tolist(), prompt)
        best_key, best = None, current
        for key in self._entries:
            shared = common_prefix(key, prompt)
            if shared > best:
                best_key, best = key, shared
        if best_key is None:
            return current
        data = self._entries[best_key]
        self._entries.move_to_end(best_key)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(llm.ctx, buffer, len(data), 0) != len(data):
            llm.reset()  # a failed restore leaves nothing usable: encode from scratch
            return 0
        llm.input_ids[: len(best_key)] = best_key
        llm.n_tokens = len(best_key)
        llm._requires_eval = True  # the logits are not restored: generate() re-decodes one token
        self.hits += 1
        self.reused_tokens += best
        return best
