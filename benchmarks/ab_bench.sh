#!/usr/bin/env bash
# Before/after A/B of `infer bench`: an older commit's tree against this one, on the same random
# checkpoints, the two alternating per cache (BENCHMARKS.md's before/after tables).
#   git archive 414b75e | tar -x -C /tmp/before          # the older tree, once
#   BEFORE=/tmp/before INFER_SHARED=../shared bash benchmarks/ab_bench.sh 8b 0.6b 14b 4b
# Sizes: 8b (--ctx 128k, a YaRN factor-4 copy of the config: 4k, 32k and 124k), 0.6b, 4b and 14b
# (--ctx 33k: 4k and 32k); BF16 and INT8 each. Per run: $OUT/ab/<size>_<kv>_<before|after>.json
# and .err; one line per length in $OUT/ab/summary.jsonl. Checkpoints go to $CKPT_DIR (/tmp):
# the 14B's 28 GB and the 8B's 16 GB fill a 64 GB disk with the GPU tests' own (delete them).
# NOTE: the device tool brings back at most 8 files from $OUT: tar $OUT/ab.
set -uo pipefail
AFTER=${AFTER:-$(cd "$(dirname "$0")/.." && pwd)}
BEFORE=${BEFORE:?set BEFORE to a tree of the older commit (git archive COMMIT | tar -x -C DIR)}
SHARED=${INFER_SHARED:?set INFER_SHARED to a copy of shared/ (tokenizer, configs)}
export PYTHONUNBUFFERED=1
OUT=${OUT:-./out}; A=$OUT/ab; mkdir -p "$A"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for t in "$BEFORE" "$AFTER"; do (cd "$t" && python3 -c "import infer; print(infer.__file__)"); done
} >> "$A/env.txt" 2>&1
ckpt() {  # size -> a complete random checkpoint folder (written once)
  local d=${CKPT_DIR:-/tmp}/ab-qwen3-$1
  if [ ! -f "$d/.complete" ]; then
    rm -rf "$d"
    (cd "$AFTER" && python3 -m models.random_checkpoint --size "$1" --out "$d" \
        --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs") \
        > /dev/null && touch "$d/.complete"
  fi
  echo "$d"; }
yarn() {  # folder -> a copy with YaRN factor 4 (131072 positions), weights linked
  local y=$1-yarn
  if [ ! -f "$y/config.json" ]; then
    mkdir -p "$y"; ln -sf "$1"/* "$y/"; rm -f "$y/config.json"
    python3 - "$1/config.json" "$y/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
c["max_position_embeddings"] = 131072
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
  fi
  echo "$y"; }
bench() {  # model ctx lengths kv size
  for side in before after; do
    tree=$BEFORE; [ $side = after ] && tree=$AFTER
    f=$A/$5_$4_$side; t0=$(date +%s)
    (cd "$tree" && timeout 300 python3 cli.py bench "$1" --ctx "$2" --lengths "$3" \
        --kv-cache "$4" --json) > "$f.json" 2> "$f.err"
    rc=$?
    python3 - "$f.json" "$5" "$4" $side $rc $(( $(date +%s) - t0 )) <<'PY' | tee -a "$A/summary.jsonl"
import json, sys
path, size, kv, side, rc, wall = sys.argv[1:]
head = {"size": size, "kv": kv, "side": side, "rc": int(rc), "wall_s": int(wall)}
try:
    d = json.load(open(path))
except ValueError as e:
    sys.exit(print(json.dumps({**head, "error": str(e)[:80]})))
for r in d.get("results", []):
    print(json.dumps({**head, "ctx": r["prompt_tokens"], "ttft_s": round(r["ttft_s"], 3),
                      "tokens_per_s": round(r["decode_tokens_per_s"], 1),
                      "ceiling_tokens_per_s": round(r["ceiling_tokens_per_s"] or 0, 1),
                      "fraction": round(r["fraction_of_ceiling"] or 0, 4), "load_s": d.get("load_s")}))
PY
    [ $rc = 0 ] || tail -n 3 "$f.err"
  done; }
for size in "$@"; do
  case $size in
    8b) m=$(yarn "$(ckpt 8b)"); for kv in bf16 int8; do bench "$m" 128k 4k,32k,124k $kv 8b; done ;;
    0.6b|4b|14b) m=$(ckpt $size); for kv in bf16 int8; do bench "$m" 33k 4k,32k $kv $size; done ;;
    tiny) m=$(ckpt tiny); bench "$m" 2k 256 bf16 tiny ;;  # a CPU check of the script itself
    *) echo "unknown size $size (8b, 0.6b, 4b, 14b, tiny)" >&2; exit 2 ;;
  esac
done
