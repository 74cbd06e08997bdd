"""HF `generate` alone on one CUDA GPU: is a GRPO rollout slow in generation or around it?

    python benchmarks/bench_generate_gpu.py [--prompt-tokens 500] [--new-tokens 128] [--json]

Skips (exit 0) without CUDA. SmolLM2-135M-Instruct in bf16, a fixed prompt repeated over the
batch, exactly `--new-tokens` sampled per row (min = max), at batch 1 and 64, with and without the
rollouts' `</tool_call>` stopping criterion (`llm.local.StopAfterText`, which decodes each row's
last tokens every step); then the time of 1,000 tiny kernel launches, the floor of a decode step
that launches a few hundred kernels. Each figure is the second of two runs (the first warms up).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt-tokens", type=int, default=500, help="about this many prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = parser.parse_args()

    from bench_train_gpu import cuda_or_skip  # this script's folder is on sys.path

    if not cuda_or_skip("generate_gpu", as_json=args.json):
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteriaList

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.local import StopAfterText
    from toolorchestra.llm.smollm2 import ensure_converted

    folder = ensure_converted(Settings().models_cache)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()
    sentence = "Write a long story about a library. "
    words = max(1, args.prompt_tokens // len(tokenizer(sentence)["input_ids"]))
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": sentence * words}],
                                            add_generation_prompt=True, return_tensors="pt")
    prompt = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    rows = []
    for batch in args.batches:
        ids = prompt.repeat(batch, 1).cuda()
        for label in ("plain", "stop_criterion"):
            extra = {}
            if label == "stop_criterion":
                extra["stopping_criteria"] = StoppingCriteriaList([StopAfterText(tokenizer, "</tool_call>", ids.shape[1])])
            for _ in range(2):  # the first warms up
                torch.cuda.synchronize()
                started = time.perf_counter()
                with torch.no_grad():
                    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                         max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                         top_p=1.0, top_k=0, pad_token_id=tokenizer.eos_token_id, **extra)
                torch.cuda.synchronize()
                seconds = time.perf_counter() - started
            new = (out.shape[1] - ids.shape[1]) * batch
            row = {"batch": batch, "prompt_tokens": int(ids.shape[1]), "mode": label, "seconds": seconds,
                   "new_tok_s": new / seconds, "ms_per_step": seconds / args.new_tokens * 1000}
            rows.append(row)
            print(f"batch {batch:>3} prompt {row['prompt_tokens']} {label:>15}: {seconds:.2f} s, "
                  f"{row['new_tok_s']:,.0f} new tok/s, {row['ms_per_step']:.1f} ms per step")
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(1000):
        torch.empty(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    launch_ms = (time.perf_counter() - started) * 1000
    print(f"1000 tiny kernel launches: {launch_ms:.1f} ms")
    if args.json:
        print(json.dumps({"benchmark": "generate_gpu", "device": torch.cuda.get_device_name(0),
                          "torch": torch.__version__, "rows": rows, "launches_1000_ms": launch_ms}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
