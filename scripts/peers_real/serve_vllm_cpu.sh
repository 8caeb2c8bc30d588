#!/usr/bin/env bash
# vLLM CPU OpenAI-compatible server for the REAL policy (Qwen2.5-Coder-0.5B-Instruct, bf16 folder),
# shared by the its_hub, ThinkBooster and prmsearch runs of the side-by-side (loopback only).
#   serve_vllm_cpu.sh start | stop     (PID in $RUN_DIR/vllm.pid, log in $RUN_DIR/vllm.log)
# The recipe of ../../../shared/peers/serve_arith_vllm_cpu.sh (python -m ...api_server, block 32,
# prefix caching, --no-enable-chunked-prefill: seeded requests crash with chunked prefill on
# vllm-cpu 0.32; --enable-prompt-tokens-details: cached_tokens in usage; VLLM_SERVER_DEV_MODE=1:
# POST /reset_prefix_cache between runs) with what the real model needs:
# - dtype: what prmsearch's own vLLM backend picks for this folder on this CPU
#   (prmsearch.engines.vllm_engine.cpu_dtype: bfloat16 with avx512_bf16/amx, else float32);
# - --max-model-len 4096 (the headline recipe's), VLLM_CPU_NUM_OF_RESERVED_CPU=0 (2-core box);
# - --chat-template continue_chat_template.jinja: the model's Qwen2.5 format, but a final assistant
#   message stays open, so the chat-completions peers continue their steps exactly like
#   prmsearch's /v1/completions prompts (same text, same token ids).
# The server runs under `nice -n 19` (NICE=0 to turn that off): the machine is shared.
# Env: VLLM_PY, MODEL_DIR, SERVED_NAME, PORT, DTYPE, RUN_DIR, CHAT_TEMPLATE, VLLM_CPU_KVCACHE_SPACE
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VLLM_PY="${VLLM_PY:-${PRMSEARCH_VENV:-$HERE/../../.venv}/bin/python}"
MODEL_DIR="${MODEL_DIR:-$HOME/.cache/prmsearch/models/qwen2.5-coder-0.5b-instruct}"
SERVED_NAME="${SERVED_NAME:-policy}"
PORT="${PORT:-18441}"
RUN_DIR="${RUN_DIR:-${SCRATCH:-/work/runs/peers-real}/run}"
CHAT_TEMPLATE="${CHAT_TEMPLATE:-$HERE/continue_chat_template.jinja}"
NICE="${NICE:-19}"
mkdir -p "$RUN_DIR"
case "${1:-start}" in
start)
  if [ -f "$RUN_DIR/vllm.pid" ] && kill -0 "$(cat "$RUN_DIR/vllm.pid")" 2>/dev/null; then
    echo "already running: pid $(cat "$RUN_DIR/vllm.pid")"; exit 0; fi
  DTYPE="${DTYPE:-$("$VLLM_PY" -c 'import sys; from prmsearch.engines.vllm_engine import cpu_dtype; print(cpu_dtype(sys.argv[1]))' "$MODEL_DIR")}"
  echo "model $MODEL_DIR dtype $DTYPE port $PORT kv ${VLLM_CPU_KVCACHE_SPACE:-2} GiB"
  HF_HUB_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}" \
  VLLM_CPU_NUM_OF_RESERVED_CPU=0 \
  nice -n "$NICE" "$VLLM_PY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
    --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$PORT" --dtype "$DTYPE" \
    --block-size 32 --enforce-eager --enable-prefix-caching --max-model-len 4096 \
    --no-enable-chunked-prefill --enable-prompt-tokens-details \
    --chat-template "$CHAT_TEMPLATE" --disable-uvicorn-access-log \
    > "$RUN_DIR/vllm.log" 2>&1 &
  echo $! > "$RUN_DIR/vllm.pid"
  t0=$(date +%s)
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    sleep 2
    if ! kill -0 "$(cat "$RUN_DIR/vllm.pid")" 2>/dev/null; then
      echo "server died; see $RUN_DIR/vllm.log"; tail -20 "$RUN_DIR/vllm.log"; exit 1; fi
    if [ $(( $(date +%s) - t0 )) -gt 600 ]; then echo "timeout"; exit 1; fi
  done
  echo "ready on http://127.0.0.1:$PORT/v1 after $(( $(date +%s) - t0 )) s, pid $(cat "$RUN_DIR/vllm.pid")"
  ;;
stop)
  # Only the PIDs this script started: the server and its own children (EngineCore, Worker),
  # never a broad pkill (other vLLM servers may run on the same machine).
  if [ -f "$RUN_DIR/vllm.pid" ]; then
    pid=$(cat "$RUN_DIR/vllm.pid")
    kids=$(pgrep -P "$pid" | tr '\n' ' ' || true)
    grand=""; for k in $kids; do grand="$grand$(pgrep -P "$k" | tr '\n' ' ' || true)"; done
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    for k in $kids $grand; do kill -0 "$k" 2>/dev/null && kill -TERM "$k" 2>/dev/null || true; done
    rm -f "$RUN_DIR/vllm.pid"; echo "stopped $pid${kids:+ (and its children $kids$grand)}"
  fi
  ;;
*) echo "usage: $0 start|stop"; exit 2;;
esac
