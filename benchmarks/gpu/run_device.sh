#!/usr/bin/env bash
# The one command the GPU machine runs (after `bash benchmarks/gpu/prepare.sh` here; see README.md beside this file).
#
#   bash benchmarks/gpu/run_device.sh              # first call: CUDA tests, then the 8B benchmark within $BUDGET_S
#   bash benchmarks/gpu/run_device.sh --second     # second call, same warm machine: nf4 + out-of-memory, MoE shape
#   bash benchmarks/gpu/run_device.sh --cpu-smoke [bench_gpu.py options]
#                                                  # here, on CPU, in the project's venv: tiny shape, 20 prompts
#
# First call: installs the carried wheels (.gpu_kit/wheels) and biaslab itself with --no-deps into a target folder
# (the device image has torch, transformers and the scientific stack, and lacks duckdb, pydantic and ibis), runs
# the suite's exact-vs-sampling and fp32 scoring-vs-naive tests on CUDA (BIASLAB_TEST_DEVICE=cuda), then
# bench_gpu.py with BUDGET_S seconds (default 400). Everything goes to $OUT (default bench_out/gpu): the JSON,
# bench.log, cuda_tests.log, nvidia-smi.txt, versions.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=first
case "${1:-}" in
    --cpu-smoke) MODE=smoke ;;
    --second) MODE=second ;;
    "") ;;
    *) echo "usage: run_device.sh [--second | --cpu-smoke]" >&2; exit 2 ;;
esac
OUT=${OUT:-bench_out/gpu}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-400}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export BIASLAB_CACHE=${BIASLAB_CACHE:-/tmp/biaslab-cache}
PY=${PYTHON:-python3}
SITE=/tmp/biaslab-site
TESTS=(tests/runners/test_choice.py tests/runners/test_scoring.py)
SELECT="agree_with_exact or equal_brute_force or equal_naive_loop or equals_naive_loop"

if [ "$MODE" = smoke ]; then
    PY=${PYTHON:-python}
    shift
    exec $PY benchmarks/gpu/bench_gpu.py --cpu-smoke --out "$OUT" "$@"   # e.g. --out DIR (the last --out wins)
fi

install() {  # wheels into $SITE, no index, no dependencies
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"
}
status=0
if [ "$MODE" = first ]; then
    [ -d .gpu_kit/wheels ] || { echo "run_device.sh: .gpu_kit is missing: run prepare.sh here and carry .gpu_kit" >&2; exit 1; }
    t0=$(date +%s)
    install .gpu_kit/wheels/*.whl || exit 1
    $PY -m pip install -q --no-deps --no-build-isolation --no-cache-dir --target "$SITE" . >"$OUT/install.log" 2>&1 \
        || { tail -20 "$OUT/install.log"; exit 1; }
    echo "installed in $(( $(date +%s) - t0 )) s"
else
    [ -d "$SITE/duckdb" ] || { echo "run_device.sh --second: $SITE is gone (a fresh machine): run the first call" >&2; exit 1; }
    install .gpu_kit_nf4/*.whl || exit 1
fi
export PYTHONPATH=$SITE BIASLAB_DATA=$PWD/.gpu_kit/datasets
{ nvidia-smi; $PY -m pip list 2>/dev/null | grep -iE "^(torch|transformers|accelerate|duckdb|pydantic|ibis|bitsandbytes|numpy) "; } \
    >"$OUT/versions.txt" 2>&1
head -20 "$OUT/versions.txt"

if [ "$MODE" = first ]; then
    echo "== CUDA tests (${SELECT})"
    BIASLAB_TEST_DEVICE=cuda timeout 180 $PY -m pytest -q -p no:cacheprovider "${TESTS[@]}" -k "$SELECT" 2>&1 \
        | tee "$OUT/cuda_tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    echo "== benchmark (budget ${BUDGET_S} s)"
    timeout $(( BUDGET_S + 200 )) $PY benchmarks/gpu/bench_gpu.py --budget-s "$BUDGET_S" --out "$OUT" 2>&1 \
        | tee "$OUT/bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
else
    small=$(( BUDGET_S / 3 ))
    echo "== nf4 + out-of-memory check (budget ${small} s)"
    timeout $(( small + 200 )) $PY benchmarks/gpu/bench_gpu.py --quant nf4 --oom-check --prompts 400 \
        --sweep-prompts 96 --dtype-check-prompts 0 --budget-s "$small" --out "$OUT" 2>&1 | tee "$OUT/bench_nf4.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    echo "== mixture of experts: Qwen3-30B-A3B dimensions, 16 of 48 layers (budget ${small} s)"
    timeout $(( small + 200 )) $PY benchmarks/gpu/bench_gpu.py --shape qwen3-moe-30b-a3b --layers 16 --prompts 400 \
        --sweep-prompts 96 --dtype-check-prompts 0 --budget-s "$small" --out "$OUT" 2>&1 | tee "$OUT/bench_moe.log"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
exit $status
