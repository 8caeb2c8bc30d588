#!/usr/bin/env bash
# its_hub 1.2.0, ThinkBooster 0.1.1 and prmsearch side by side on ONE vLLM CPU server with the REAL
# policy (Qwen2.5-Coder-0.5B-Instruct, bf16 folder), the same verifier in process for all three
# (a qwen-prm-layout PRM folder, and the zero-cost one), GSM8K test (shuffle seed 0, first
# $PROBLEMS), beam $BUDGET (width $WIDTH), particle filter $BUDGET (its_hub, prmsearch) and
# best-of-$BUDGET; then one markdown table (summarize.py). Every process runs under nice -n 19.
#   run_side_by_side.sh [OUT]        (default /work/runs/peers-real/results)
# Env: PRM (PRM folder; default the project's trained 0.5B PRM), VERIFIERS (comma list of
#      instant,prm; default both, prm only when $PRM exists), LIBS (itshub,thinkbooster,prmsearch),
#      ALGOS (beam,pf,bon; ThinkBooster skips pf), PROBLEMS (8), BUDGET (16), WIDTH (4),
#      MAX_STEPS (16), MAX_STEP_TOKENS (320), SOLUTION_MAX_TOKENS (2048), TEMPERATURE (0.8),
#      AGGREGATION (last), REPEATS (1), WARMUP (1), NO_RAW (set: skip the raw-engine baselines),
#      PORT (18441), PRMSEARCH_PY, ITSHUB_PY, TB_PY, SCRATCH (/work/runs/peers-real),
#      VLLM_CPU_KVCACHE_SPACE (2)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SCRATCH="${SCRATCH:-/work/runs/peers-real}"
OUT="${1:-$SCRATCH/results}"
PRMSEARCH_PY="${PRMSEARCH_PY:-$HERE/../../.venv/bin/python}"
ITSHUB_PY="${ITSHUB_PY:-$SCRATCH/venv-itshub/bin/python}"
TB_PY="${TB_PY:-$SCRATCH/venv-tb/bin/python}"
PRM="${PRM:-$HOME/.cache/prmsearch/prms/qwen2.5-coder-0.5b-gsm8k-mc-head-432}"
if [ -z "${VERIFIERS:-}" ]; then VERIFIERS=instant; [ -d "$PRM" ] && VERIFIERS=instant,prm; fi
LIBS="${LIBS:-itshub,thinkbooster,prmsearch}"; ALGOS="${ALGOS:-beam,pf,bon}"
PORT="${PORT:-18441}"; URL="http://127.0.0.1:$PORT/v1"
export HF_HUB_OFFLINE=1 PYTHONWARNINGS=ignore VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"
mkdir -p "$OUT"
N=(nice -n 19)
COMMON=(--base-url "$URL" --problems-json "$OUT/problems.json" --problems "${PROBLEMS:-8}"
        --budget "${BUDGET:-16}" --max-steps "${MAX_STEPS:-16}" --max-step-tokens "${MAX_STEP_TOKENS:-320}"
        --solution-max-tokens "${SOLUTION_MAX_TOKENS:-2048}" --temperature "${TEMPERATURE:-0.8}"
        --aggregation "${AGGREGATION:-last}" --repeats "${REPEATS:-1}" --warmup "${WARMUP:-1}")
[ -n "${NO_RAW:-}" ] && COMMON+=(--no-raw)

"${N[@]}" "$PRMSEARCH_PY" "$HERE/sbs_problems.py" --n "${PROBLEMS:-8}" --out "$OUT/problems.json"
if [[ ",$VERIFIERS," == *",prm,"* ]]; then
  echo "== verifier parity: prm_adapter.PRMCore vs prmsearch's qwen-prm scorer on $PRM"
  "${N[@]}" "$PRMSEARCH_PY" "$HERE/prm_adapter.py" --check --prm "$PRM" 2>/dev/null | tee "$OUT/prm_parity.txt"
fi

SERVE=(env RUN_DIR="$OUT/run" PORT="$PORT" VLLM_PY="$PRMSEARCH_PY" "$HERE/serve_vllm_cpu.sh")
"${SERVE[@]}" start
trap '"${SERVE[@]}" stop || true' EXIT
SP=$(cat "$OUT/run/vllm.pid")
for V in ${VERIFIERS//,/ }; do
  P="instant"; [ "$V" = prm ] && P="$PRM"
  if [[ ",$LIBS," == *",itshub,"* ]]; then
    echo "== its_hub, verifier $V ($ALGOS)"
    "${N[@]}" "$ITSHUB_PY" "$HERE/itshub_e2e.py" "${COMMON[@]}" --server-pid "$SP" --prm "$P" \
      --width "${WIDTH:-4}" --algos "$ALGOS" --out "$OUT/itshub_$V.json" > "$OUT/itshub_$V.log" 2>&1 \
      || echo "its_hub ($V) failed: see $OUT/itshub_$V.log"
  fi
  TB_ALGOS=$(echo ",$ALGOS," | sed 's/,pf,/,/g; s/^,//; s/,$//')
  if [[ ",$LIBS," == *",thinkbooster,"* ]] && [ -n "$TB_ALGOS" ]; then
    echo "== ThinkBooster, verifier $V ($TB_ALGOS)"
    "${N[@]}" "$TB_PY" "$HERE/thinkbooster_e2e.py" "${COMMON[@]}" --server-pid "$SP" --prm "$P" \
      --width "${WIDTH:-4}" --algos "$TB_ALGOS" --out "$OUT/thinkbooster_$V.json" \
      > "$OUT/thinkbooster_$V.log" 2>&1 || echo "ThinkBooster ($V) failed: see $OUT/thinkbooster_$V.log"
  fi
  if [[ ",$LIBS," == *",prmsearch,"* ]]; then
    echo "== prmsearch, verifier $V ($ALGOS)"
    "${N[@]}" "$PRMSEARCH_PY" "$HERE/prmsearch_e2e.py" "${COMMON[@]}" --server-pid "$SP" --prm "$P" \
      --width "${WIDTH:-4}" --threads 1 --algos "$ALGOS" --out "$OUT/prmsearch_$V.json" \
      > "$OUT/prmsearch_$V.log" 2>&1 || echo "prmsearch ($V) failed: see $OUT/prmsearch_$V.log"
  fi
done
"${SERVE[@]}" stop
trap - EXIT
"${N[@]}" "$PRMSEARCH_PY" "$HERE/summarize.py" "$OUT" | tee "$OUT/summary.md"
