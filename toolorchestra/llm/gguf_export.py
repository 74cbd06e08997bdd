"""Convert a transformers Llama checkpoint (a safetensors folder) to GGUF for the llama.cpp engine.

`ensure_gguf(folder, cache_root, weights="f16")` returns the GGUF of a checkpoint, converting it
on first use and caching the file under `cache_root/gguf/` by the hash of the checkpoint's weight
files (a retrained checkpoint gets a new file; the same weights are converted once per machine).

The conversion follows llama.cpp's own converter (`convert_hf_to_gguf.py`, `LlamaModel`) with the
`gguf` package's writer and tensor-name map: hyper-parameters as GGUF keys, the byte-level BPE
vocabulary (tokens, types, merges, special ids, chat template), the q/k projections permuted
from transformers' rotate-half layout to llama.cpp's interleaved RoPE layout, 1-D tensors (norms)
in f32 and matrices in the chosen type (`f32` exact, `f16`, `bf16` - faster on CPUs whose llama.cpp
build has AVX512_BF16 kernels, but it rounds more -, `q8_0`). Only what the project trains
is supported (`LlamaForCausalLM`, SmolLM2's architecture, with a byte-level BPE tokenizer); anything
else, or a broken checkpoint, is one `ConfigError` naming the file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from toolorchestra.core.checksum import weights_sha256
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import replace_path

log = logging.getLogger(__name__)

GGUFWeights = Literal["f32", "f16", "bf16", "q8_0"]
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
# Bump when the conversion changes, so stale cached files are rebuilt.
CONVERTER_VERSION = "1"


def ensure_gguf(folder: str | Path, cache_root: Path, *, weights: GGUFWeights = "f16",
                digest: str | None = None) -> Path:
    """The cached GGUF of the checkpoint `folder`, converted on first use. `digest`: the weights'
    hash when the caller already knows it (a registered model's manifest records it), so a cached
    file is found without reading the weights."""
    folder = Path(folder)
    read_config(folder)  # a clear error before hashing gigabytes of a folder we cannot convert
    digest = digest or weights_sha256(folder)
    target = cache_root / "gguf" / f"{digest[:24]}-{weights}-v{CONVERTER_VERSION}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{id(folder):x}.staging")
    log.info("converting %s to %s (%s, once)", folder, target.name, weights)
    try:
        convert(folder, staging, weights=weights)
        replace_path(staging, target)  # concurrent converters write identical files; the last rename wins
    finally:
        staging.unlink(missing_ok=True)
    return target


def read_config(folder: Path) -> dict[str, Any]:
    """The checkpoint's `config.json`, checked to be an architecture this converter handles."""
    path = folder / "config.json"
    if not path.is_file():
        raise ConfigError(folder, "not a transformers model folder (no config.json)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"corrupt config, not JSON: {exc}") from None
    architectures = config.get("architectures") or [config.get("model_type")]
    if not isinstance(config, dict) or architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise ConfigError(path, f"unsupported architecture {architectures[0]!r} for GGUF conversion; "
                          f"supported: {list(SUPPORTED_ARCHITECTURES)}", key="architectures")
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        raise ConfigError(path, f"unsupported RoPE scaling {rope!r} for GGUF conversion", key="rope_scaling")
    return config


def _rope_theta(config: dict[str, Any]) -> float:
    # transformers 5 keeps it in `rope_parameters`; older configs at the top level.
    return float((config.get("rope_parameters") or {}).get("rope_theta") or config.get("rope_theta") or 10000.0)


def permute_rope(weights: Any, n_head: int) -> Any:
    """q/k rows from transformers' rotate-half RoPE layout to llama.cpp's interleaved one
    (`LlamaModel.permute` in llama.cpp's converter)."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def _load_tensors(folder: Path) -> dict[str, Any]:
    """Every tensor of the checkpoint as float32 numpy arrays (bf16 goes through torch)."""
    from safetensors import SafetensorError, safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(folder, "no weight files (*.safetensors) in the checkpoint")
    tensors: dict[str, Any] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    tensors[name] = handle.get_tensor(name).float().numpy()
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(path, f"corrupt checkpoint weights: {exc}") from None
    return tensors


def _vocab(folder: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """(tokens, token types) in id order, as llama.cpp's `get_vocab_base` writes them."""
    import gguf
    from transformers import AutoTokenizer

    tokenizer_file = folder / "tokenizer.json"
    try:
        model_type = json.loads(tokenizer_file.read_text(encoding="utf-8"))["model"]["type"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(tokenizer_file, f"missing or corrupt tokenizer: {exc}") from None
    if model_type != "BPE":
        raise ConfigError(tokenizer_file, f"unsupported tokenizer model {model_type!r} for GGUF conversion "
                          "(byte-level BPE only)", key="model.type")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    reverse = {i: t for t, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.CONTROL if i in added and added[i].special else
                         gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL)
    return tokens, types


def convert(folder: str | Path, target: str | Path, *, weights: GGUFWeights = "f16",
            tensors: dict[str, Any] | None = None) -> Path:
    """Write the GGUF of the Llama checkpoint `folder` to `target`. `tensors` (name -> float32
    numpy array, e.g. a model's live `state_dict`) replaces the folder's weight files: the folder
    then gives only the config and tokenizer (GRPO exports the policy it is training this way)."""
    import gguf
    import numpy as np

    folder, target = Path(folder), Path(target)
    config = read_config(folder)
    try:
        n_layer, n_embd = int(config["num_hidden_layers"]), int(config["hidden_size"])
        n_head = int(config["num_attention_heads"])
        n_head_kv = int(config.get("num_key_value_heads") or n_head)
        vocab_size, n_ff = int(config["vocab_size"]), int(config["intermediate_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(folder / "config.json", f"missing or invalid hyper-parameter: {exc}") from None
    head_dim = int(config.get("head_dim") or n_embd // n_head)
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[weights]
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[weights]

    tensors = _load_tensors(folder) if tensors is None else tensors
    tokens, types = _vocab(folder, vocab_size)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layer)
    writer = gguf.GGUFWriter(str(target), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_name(folder.name)
    writer.add_block_count(n_layer)
    writer.add_context_length(int(config.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(vocab_size)
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("gpt2")
    # The engine tokenizes with the checkpoint's own transformers tokenizer (identical prompt ids
    # across engines), so llama.cpp's pre-tokenizer choice never touches a prompt.
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size).add_to_gguf(writer, quiet=True)

    tied = bool(config.get("tie_word_embeddings", False))
    for name, data in tensors.items():
        if tied and name == "lm_head.weight":
            continue  # llama.cpp reuses token_embd as the output matrix when `output` is absent
        if name.endswith("rotary_emb.inv_freq"):
            continue
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ConfigError(folder, f"tensor {name!r} has no GGUF name in the Llama architecture")
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            data = permute_rope(data, n_head)
        elif name.endswith(("k_proj.weight", "k_proj.bias")):
            data = permute_rope(data, n_head_kv)
        kind = qtype if data.ndim == 2 else gguf.GGMLQuantizationType.F32
        if kind == gguf.GGMLQuantizationType.Q8_0 and data.shape[-1] % 32:
            kind = gguf.GGMLQuantizationType.F16  # Q8_0 blocks are 32 wide
        packed = gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), kind)
        writer.add_tensor(mapped, packed, raw_dtype=kind)  # the writer derives Q8_0's shape from bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
