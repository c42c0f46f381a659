#!/usr/bin/env bash
# One GPU session's checks and measurements, in the order that matters; logs go to $OUT (or ./out).
#   bash benchmarks/gpu_check.sh tests      # pytest -m gpu (kernels, backend, engine, model)
#   bash benchmarks/gpu_check.sh sweep      # decode tile sweep
#   bash benchmarks/gpu_check.sh bench      # attention benchmark vs SDPA
# INFER_SHARED must point at a copy of shared/ (tokenizer, configs, texts) for the model tests.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
echo "commit ${INFER_COMMIT:-unknown}" | tee -a "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    | tee -a "$OUT/env.txt"
for what in "$@"; do
  case "$what" in
    tests) python3 -m pytest -q -m gpu -s -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" ;;
    sweep) python3 benchmarks/sweep_decode.py ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep_decode.jsonl" ;;
    bench) python3 benchmarks/attention.py --out "$OUT/attention.jsonl" 2>&1 \
             | tee "$OUT/attention.log" ;;
    *) echo "unknown step $what" >&2; exit 2 ;;
  esac
done
