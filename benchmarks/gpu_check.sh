#!/usr/bin/env bash
# One GPU session's checks and measurements; logs go to $OUT (or ./out). Steps, in any order:
#   tests      pytest -m gpu (kernels, backend, graphs, engine, CLI, model vs transformers)
#   sweep      decode tile sweep (benchmarks/sweep_decode.py --quick)
#   bench      attention kernels vs torch SDPA (benchmarks/attention.py)
#   floor      INT8 decode stage 1 vs a plain stream of its bytes (benchmarks/decode_floor.py)
#   gemv       decode projections, kernels/gemv.py vs cuBLAS (benchmarks/gemv.py), then each
#              one's streaming rate and fixed cost a launch (benchmarks/gemv_fit.py)
#   e2e        engine decode tokens/s, CUDA graphs vs eager (benchmarks/decode_e2e.py)
#   summarize  `infer summarize` of a 28k-token book excerpt with a random Qwen3-8B, --ctx 32k
#   batch      aggregate decode of B = 1..16 sequences at 32k (benchmarks/batch_decode.py)
#   book       `infer summarize war_and_peace.txt --ctx 32k` (773k tokens: map-reduce in parts),
#              BF16 and INT8 with the batch the capacity check picks, then BF16 one part at a
#              time (--batch 1); BOOK_KV picks the caches, BOOK_SEQ=0 skips the sequential run
#   long128k   a ~115k-token summarize at --ctx 128k with INT8, on a pseudo-terminal (the
#              prefill progress bar is in long128k.tty)
#   train      train the small Qwen3 (benchmarks/train_small_qwen3.py, ~5 min) into $SMALL
#   trainwide  train the wide one instead (Qwen3-1.7B's layers, 3 of them: a decode step bound
#              by weight reads, as the real models' are; ~4 min, BENCHMARKS.md's wide #1)
#              into $SMALL; the steps below then measure it
#   traingrow  train the small Qwen3 (2400 steps, ~3.8 min; 1100 steps of copying rows of 512
#              tokens (induction forms at steps 700-800: BENCHMARKS.md), then rows of 2048:
#              copying, text chunks repeated, 40 % summary requests answered by quoting), widen
#              it to hidden 2048 and MLP 6144 without changing its function, train on ~250
#              steps at that width (~0.9 min; benchmarks/small_lm_grow.py): a copying model
#              whose decode is bound by its weight bytes, into $SMALL
#   trained    the GPU tests on the trained model in $SMALL (tests/test_trained_gpu.py)
#   int8kl     KL(bf16 || int8) of the trained model at 2k (its training length), 4k and 32k
#              (benchmarks/int8_kl.py), with each key-balance mode, and the BF16 noise floor
#              (the Triton attention against torch's; KL_ARGS overrides)
#   spec       speculative decoding on the trained model's held-out chapters, with and without
#              (benchmarks/speculative.py; SPEC_ARGS replaces the default --ctx 2k, the
#              length of the training's summary rows)
#   spec8b     the same on the random 8B ($CKPT) with a Pride and Prejudice excerpt: the cost
#   load       weights to the GPU in GB/s against the read and H2D ceilings and two peers
#              (benchmarks/load_weights.py, the 8B; LOAD_ARGS=--sweep for the staging sizes),
#              then the wall time of `infer generate` 8B, 64 tokens, twice on a fresh Triton
#              cache (the first run compiles every kernel: the cold start, with the count of
#              kernel specializations it compiled, by name; the second is warm)
#   startup    `infer generate` 8B, 64 tokens, from the shell in fresh processes (warm caches):
#              one untimed run, then the plain (INFER_STAGED_LOAD=0) and the staged loader
#              (the default) alternating, 3 each: wall, load_s, the process's exit after the JSON
#   ttft       a fresh process's first token against a second reply's, 28.5k tokens, the 8B
#              (benchmarks/ttft_first.py; TTFT_ARGS, e.g. --capture-ahead 16384,32768)
#   fusions    the decode A/B of the shipped flags (the split-K reduce in the add + RMSNorm
#              included) against the same with the KV store fused into the q/k-norm + RoPE
#              launch (benchmarks/decode_e2e.py --variants default,default+fused_store, 2
#              rounds alternating), BF16 at 4k and 32k, per size of FUSION_SIZES (default
#              "0.6b 1.7b 8b"; the 8B is $CKPT); FUSION_VARIANTS overrides the variants,
#              FUSION_KV the caches (default bf16; "bf16 int8" for both)
#   prefill    a 32k prefill's kernel time by kind against its FLOP counts, BF16 and INT8, the
#              8B (benchmarks/profile_prefill.py)
#   barrier    a grid barrier inside one kernel against a kernel boundary, plain and PDL
#              (benchmarks/grid_barrier.py: the persistent decode layer's question)
#   chain      36 dependent one-row GEMVs (4096 x 4096): one Gluon launch whose loading warp
#              streams the weights across grid barriers, against a kernels/gemv launch each
#              (benchmarks/persistent_chain.py: the fixed cost a phase either way)
#   fa3        the Gluon FlashAttention-3-style prefill attention: its GPU tests, then against
#              our Triton kernel and cuDNN at 4k and 32k (benchmarks/prefill_fa3_bench.py)
#   sampling   the next-token pick alone: greedy and top-k kernels against torch's sampling ops,
#              per stage-1 block and stage-2 warps (benchmarks/sampling.py; SAMPLING_ARGS)
#   profile    the decode step's kernels, GPU busy time and gaps (benchmarks/profile_decode.py),
#              8B and 0.6B at PROFILE_CTX (default 4096,32768), BF16 and INT8; PROFILE_ARGS adds
#              flags (a sampled step: "--temperature 0.6 --top-k 20 --top-p 0.95")
#   graphorder whether a sampled step's capture still slows the graphs replayed after it: the
#              orders of benchmarks/graph_order.py's NEXT_ORDERS, one process each, without and
#              with --keyed-noise (infer.noise_keys.KEYED_NOISE, on as shipped), then the sampled
#              0.6B at 4k as shipped and with keyed_noise off, in alternating processes, 2 rounds
#   stage1     decode attention at 4k (inside a step, stage 1 read the 0.6B's 17 MB of a layer's
#              cache in ~13 us, ~45 % of the read bandwidth: BENCHMARKS.md):
#              benchmarks/sweep_decode.py over splits, key blocks and stages, BF16, at the 8B's
#              head shape (group 4; the 0.6B's is 2)
#   gemvtiles  the GEMV tiles of the 8B on this card: benchmarks/gemv.py's sweep over GEMV_TILES,
#              each tile's streaming rate and fixed cost (benchmarks/gemv_fit.py),
#              benchmarks/gemv_pick.py's pick per weight class (> 1 % better in a step's
#              terms), then, if it picked any, the decode A/B in the step (decode_e2e.py, BF16
#              and INT8 at 4k and 32k, the default and the pick in alternating processes, 2 rounds)
#   int8long   INT8 stage-1 tiles at 124k (the 8B with YaRN): the default against the 1-warp,
#              8-per-SM tile of before 88c87d4, alternating, 2 rounds (INT8_LONG_TILES overrides:
#              --decode-tiles objects without spaces, separated by spaces, unquoted)
# INFER_SHARED must point at a copy of shared/ (tokenizer, configs, texts).
# NOTE: the device tool brings back at most 8 files from $OUT: tar the logs of a long run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
SHARED=${INFER_SHARED:?set INFER_SHARED to a copy of shared/}
CKPT=${CKPT:-/tmp/qwen3-8b-random}
SMALL=${SMALL:-checkpoints/qwen3-small-trained}
echo "commit ${INFER_COMMIT:-unknown}" | tee -a "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" \
    | tee -a "$OUT/env.txt"
for what in "$@"; do
  case "$what" in
    tests) python3 -m pytest -q -m gpu -s -p no:cacheprovider ${TEST_ARGS:-tests} 2>&1 \
             | tee "$OUT/gpu_tests.log" | grep -E "passed|failed|FAILED|rror" ;;
    sweep) python3 benchmarks/sweep_decode.py ${SWEEP_ARGS:---quick} > "$OUT/sweep_decode.jsonl" 2>&1
           tail -n 1 "$OUT/sweep_decode.jsonl" ;;
    bench) python3 benchmarks/attention.py ${BENCH_ARGS:-} --out "$OUT/attention.jsonl" \
             > "$OUT/attention.log" 2>&1; grep -A 90 "^what" "$OUT/attention.log" ;;
    barrier) python3 benchmarks/grid_barrier.py ${BARRIER_ARGS:-} 2>&1 | tee "$OUT/grid_barrier.jsonl" ;;
    chain) timeout 300 python3 benchmarks/persistent_chain.py ${CHAIN_ARGS:-} 2>&1 | tee "$OUT/persistent_chain.jsonl" ;;
    fa3) python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_prefill_fa3.py 2>&1 | tail -5 \
           | tee "$OUT/prefill_fa3_tests.log"
      timeout 300 python3 benchmarks/prefill_fa3_bench.py ${FA3_ARGS:-} 2>&1 | tee "$OUT/prefill_fa3.jsonl" ;;
    floor) python3 benchmarks/decode_floor.py --timeline 2>&1 | tee "$OUT/decode_floor.jsonl" ;;
    gemv) python3 benchmarks/gemv.py ${GEMV_ARGS:-} 2>&1 | tee "$OUT/gemv.jsonl"
      python3 benchmarks/gemv_fit.py "$OUT/gemv.jsonl" | tee "$OUT/gemv_fit.jsonl" ;;
    sampling) python3 benchmarks/sampling.py ${SAMPLING_ARGS:-} 2>&1 | tee "$OUT/sampling.jsonl" ;;
    e2e) python3 benchmarks/decode_e2e.py --workdir /tmp ${E2E_ARGS:-} 2>&1 | tee "$OUT/decode_e2e.jsonl" ;;
    summarize)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      head -n 2600 "$SHARED/data/texts/pride_and_prejudice.txt" > /tmp/book.txt
      for kv in bf16 int8; do
        python3 cli.py summarize /tmp/book.txt --model "$CKPT" --ctx 32k --kv-cache $kv --json \
            ${SUMMARIZE_ARGS:-} > "$OUT/summarize_$kv.json" 2> "$OUT/summarize_$kv.err"
        echo "summarize kv=$kv rc=$?"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['text']=d['text'][:60]; print(json.dumps(d))" \
            "$OUT/summarize_$kv.json"
      done ;;
    batch) python3 benchmarks/batch_decode.py --workdir /tmp ${BATCH_ARGS:-} 2>&1 \
             | tee "$OUT/batch_decode.jsonl" ;;
    book|long128k)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      if [ "$what" = long128k ]; then
        head -c 480000 "$SHARED/data/texts/war_and_peace.txt" > /tmp/book128k.txt
        python3 -c 'import pty, sys; pty.spawn(sys.argv[1:])' python3 cli.py summarize \
            /tmp/book128k.txt --model "$CKPT" --ctx 128k --kv-cache int8 --max-new-tokens 64 \
            > "$OUT/long128k.tty" 2>&1
        echo "long128k rc=$?"; tail -c 600 "$OUT/long128k.tty"; echo
        continue
      fi
      runs="${BOOK_KV:-bf16 int8}"; [ "${BOOK_SEQ:-1}" = 1 ] && runs="$runs bf16-seq"
      for run in $runs; do
        kv=${run%-seq}; extra=""; [ "$run" != "$kv" ] && extra="--batch 1"
        t0=$(date +%s.%N)
        python3 cli.py summarize "$SHARED/data/texts/war_and_peace.txt" --model "$CKPT" \
            --ctx 32k --kv-cache "$kv" --part-tokens 512 --max-new-tokens 1024 $extra --json \
            > "$OUT/book_$run.json" 2> "$OUT/book_$run.err"
        rc=$?; t1=$(date +%s.%N)
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'run': sys.argv[2], 'rc': int(sys.argv[3]), 'wall_s': round(float(sys.argv[5]) - float(sys.argv[4]), 1), 'load_s': d.get('load_s'), 'stages': d.get('stages'), 'ttft_s': d.get('ttft_s'), 'new_tokens': d.get('new_tokens'), 'decode_tokens_per_s': d.get('decode_tokens_per_s'), 'levels': sorted({p['level'] for p in d.get('parts', [])})}))" \
            "$OUT/book_$run.json" "$run" "$rc" "$t0" "$t1" || tail -n 3 "$OUT/book_$run.err"
      done ;;
    train) python3 benchmarks/train_small_qwen3.py --texts "$SHARED/data/texts" \
             --tokenizer "$SHARED/data/qwen3-tokenizer" --out "$SMALL" ${TRAIN_ARGS:-} \
             --report "$OUT/train_small.jsonl" > "$OUT/train_small.log" 2>&1
           echo "train rc=$?"; grep -v train_progress "$OUT/train_small.log" | tail -n 12 ;;
    trainwide) python3 benchmarks/train_small_qwen3.py --texts "$SHARED/data/texts" \
             --tokenizer "$SHARED/data/qwen3-tokenizer" --out "$SMALL" --hidden 2048 --layers 3 \
             --heads 16 --kv-heads 8 --head-dim 128 --intermediate 6144 --steps 1200 \
             --copy-steps 550 --lr 1e-3 --minutes 4.2 ${TRAIN_ARGS:-} \
             --report "$OUT/train_wide.jsonl" > "$OUT/train_wide.log" 2>&1
           echo "trainwide rc=$?"; grep -v train_progress "$OUT/train_wide.log" | tail -n 12 ;;
    traingrow) python3 benchmarks/train_small_qwen3.py --texts "$SHARED/data/texts" \
             --tokenizer "$SHARED/data/qwen3-tokenizer" --out "$SMALL" --steps 2400 \
             --copy-steps 1100 --minutes 3.8 --grow-hidden 2048 --grow-intermediate 6144 \
             --grow-steps 250 --grow-minutes 0.9 --long-seq 2048 --summary-frac 0.4 \
             --summary-pool 1024 ${TRAIN_ARGS:-} \
             --report "$OUT/train_grow.jsonl" > "$OUT/train_grow.log" 2>&1
           echo "traingrow rc=$?"; grep -v train_progress "$OUT/train_grow.log" | tail -n 16 ;;
    fusions)
      fv=${FUSION_VARIANTS:-default,default+fused_store}
      for size in ${FUSION_SIZES:-0.6b 1.7b 8b}; do
        if [ "$size" = 8b ]; then
          [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b \
              --out "$CKPT" --tokenizer "$SHARED/data/qwen3-tokenizer" \
              --config-dir "$SHARED/data/qwen3-configs"
          python3 benchmarks/decode_e2e.py --model "$CKPT" --lengths 4096 32768 --kv ${FUSION_KV:-bf16} \
              --eager-tokens 0 --variants "$fv" --rounds 2 2>&1 | tee "$OUT/fusions_8b.jsonl"
        else
          python3 benchmarks/decode_e2e.py --size "$size" --workdir /tmp --lengths 4096 32768 \
              --kv ${FUSION_KV:-bf16} --eager-tokens 0 --variants "$fv" --rounds 2 2>&1 \
              | tee "$OUT/fusions_$size.jsonl"
        fi
      done ;;
    prefill)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      for kv in bf16 int8; do
        python3 benchmarks/profile_prefill.py --ckpt "$CKPT" --tokens 32768 --kv $kv 2>&1 \
          | tee -a "$OUT/profile_prefill.jsonl"
      done ;;
    ttft)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      python3 benchmarks/ttft_first.py --ckpt "$CKPT" ${TTFT_ARGS:-} 2>&1 | tee "$OUT/ttft_first.jsonl" ;;
    trained) INFER_TRAINED_MODEL=$SMALL python3 -m pytest -q -m gpu -p no:cacheprovider \
               tests/test_trained_gpu.py 2>&1 | tee "$OUT/trained_tests.log" | tail -n 3 ;;
    int8kl) python3 benchmarks/int8_kl.py --model "$SMALL" --texts "$SHARED/data/texts" \
              ${KL_ARGS:---balance off,norm,proj --window 2048 --positions 2048,4096,32768 --noise-floor} --report "$OUT/int8_kl.jsonl" 2>&1 | tail -n 4 ;;
    spec) python3 benchmarks/speculative.py --ckpt "$SMALL" --held-out --texts "$SHARED/data/texts" \
            ${SPEC_ARGS:---ctx 2k} 2>&1 | tee "$OUT/speculative.jsonl" | grep -v '"text": "held' ;;
    spec8b)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      head -c 40000 "$SHARED/data/texts/pride_and_prejudice.txt" > /tmp/pp40k.txt
      python3 benchmarks/speculative.py --ckpt "$CKPT" --text /tmp/pp40k.txt --ctx 16k \
          ${SPEC8B_ARGS:-} 2>&1 | tee "$OUT/speculative_8b.jsonl" ;;
    load)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      python3 benchmarks/load_weights.py --ckpt "$CKPT" ${LOAD_ARGS:-} 2> "$OUT/load_weights.err" \
          | tee "$OUT/load_weights.jsonl"
      tcache=$(mktemp -d)  # an empty Triton cache: run 1 compiles every kernel (cold), run 2 not
      for run in 1 2; do
        t0=$(date +%s.%N)
        TRITON_CACHE_DIR=$tcache python3 cli.py generate "$CKPT" Hello --max-new-tokens 64 \
            --json > "$OUT/generate_$run.json" 2> "$OUT/generate_$run.err"
        rc=$?; t1=$(date +%s.%N)
        [ "$run" = 1 ] && python3 -c "import collections,json,pathlib,sys; n=collections.Counter(p.stem for p in pathlib.Path(sys.argv[1]).rglob('*.cubin')); print(json.dumps({'what': 'cold_compiles', 'kernels': sum(n.values()), 'by_name': dict(n.most_common())}))" \
            "$tcache" | tee -a "$OUT/load_weights.jsonl"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({'what': 'generate_wall', 'run': int(sys.argv[2]), 'rc': int(sys.argv[3]), 'wall_s': round(float(sys.argv[5]) - float(sys.argv[4]), 2), 'load_s': d.get('load_s'), 'ttft_s': d.get('ttft_s'), 'new_tokens': d.get('new_tokens')}))" \
            "$OUT/generate_$run.json" "$run" "$rc" "$t0" "$t1" | tee -a "$OUT/load_weights.jsonl" \
            || tail -n 3 "$OUT/generate_$run.err"
      done ;;
    startup)
      [ -f "$CKPT/config.json" ] || python3 -m models.random_checkpoint --size 8b --out "$CKPT" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      cat "$CKPT"/*.safetensors > /dev/null
      python3 cli.py generate "$CKPT" Hello --max-new-tokens 64 --json > /dev/null 2>&1
      for run in 1 2 3; do
        for staged in 0 1; do
          INFER_STAGED_LOAD=$staged python3 - "$CKPT" "$run" "$staged" <<'PY' | tee -a "$OUT/startup.jsonl"
import json, subprocess, sys, time
t0 = time.time()
p = subprocess.Popen([sys.executable, "cli.py", "generate", sys.argv[1], "Hello",
                      "--max-new-tokens", "64", "--json"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
line = p.stdout.readline(); t1 = time.time(); p.stdout.read(); p.wait(); t2 = time.time()
d = json.loads(line) if line.strip() else {}
print(json.dumps({"what": "startup", "run": int(sys.argv[2]), "staged": sys.argv[3] == "1",
                  "rc": p.returncode, "wall_s": round(t2 - t0, 2), "exit_s": round(t2 - t1, 2),
                  **{k: d.get(k) for k in ("load_s", "warm_up_s", "ttft_s")}}))
PY
        done
      done ;;
    graphorder)
      ck=/tmp/qwen3-0.6b-random
      [ -f "$ck/config.json" ] || python3 -m models.random_checkpoint --size 0.6b --out "$ck" \
          --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
      orders=$(python3 -c "from benchmarks.graph_order import NEXT_ORDERS; print(' '.join(NEXT_ORDERS))")
      for order in $orders; do
        for flag in "" --keyed-noise; do
          python3 benchmarks/graph_order.py --ckpt "$ck" --order "$order" $flag 2>&1 \
              | tee -a "$OUT/graph_order.jsonl"
        done
      done
      sampled="--temperature 0.6 --top-k 20 --top-p 0.95"
      for r in 1 2; do for v in default default-keyed_noise; do
        python3 benchmarks/decode_e2e.py --model "$ck" --size 0.6b --lengths 4096 --kv bf16 \
            --eager-tokens 0 --variants "$v" $sampled 2>&1 | grep -E "tokens_per_s|rror" \
            | tee -a "$OUT/keyed_noise.jsonl"
      done; done ;;
    stage1)
      python3 benchmarks/sweep_decode.py --seq-lens 4096 --dtypes bf16 --block-n 64 128 \
          --splits 0 16 33 66 132 --stages 1 2 3 --split-timing ${STAGE1_ARGS:-} \
          > "$OUT/stage1_4k.jsonl" 2>&1; tail -n 1 "$OUT/stage1_4k.jsonl" ;;
    profile)
      for size in 8b 0.6b; do
        ck=/tmp/qwen3-$size-random; [ "$size" = 8b ] && ck=$CKPT
        [ -f "$ck/config.json" ] || python3 -m models.random_checkpoint --size $size --out "$ck" \
            --tokenizer "$SHARED/data/qwen3-tokenizer" --config-dir "$SHARED/data/qwen3-configs"
        python3 benchmarks/profile_decode.py --ckpt "$ck" --ctx "${PROFILE_CTX:-4096,32768}" \
            --kv bf16,int8 ${PROFILE_ARGS:-} 2> "$OUT/profile_decode_$size.err" > "$OUT/profile_decode_$size.jsonl"
        echo "profile $size rc=$?"; grep '"what": "step"' "$OUT/profile_decode_$size.jsonl"
      done ;;
    gemvtiles)
      python3 benchmarks/gemv.py --size 8b --tiles "${GEMV_TILES:-16x256x8,16x512x6,16x256x12,32x256x8,64x128x8,32x128x6,64x256x4,64x128x5x8,32x256x5x8}" \
          > "$OUT/gemv_tiles.jsonl" 2> "$OUT/gemv_tiles.err"
      python3 benchmarks/gemv_fit.py "$OUT/gemv_tiles.jsonl" | tee "$OUT/gemv_tiles_fit.jsonl"
      pick=$(python3 benchmarks/gemv_pick.py "$OUT/gemv_tiles.jsonl" 2>> "$OUT/gemv_tiles.err")
      echo "pick: $pick" | tee -a "$OUT/gemv_tiles.err"
      if [ -n "$pick" ] && [ "$pick" != "{}" ]; then
        for round in 1 2; do for tiles in '{}' "$pick"; do
          python3 benchmarks/decode_e2e.py --workdir /tmp --lengths 4096 32768 --eager-tokens 0 \
              --decode-tiles "$tiles" 2>> "$OUT/gemv_tiles.err" | grep tokens_per_s \
              | tee -a "$OUT/gemv_tiles_e2e.jsonl"
        done; done
      fi ;;
    int8long)
      for round in 1 2; do
        for tiles in ${INT8_LONG_TILES:-'{}' '{"int8":{"num_warps":1,"programs_per_sm":8}}'}; do
          python3 benchmarks/decode_e2e.py --workdir /tmp --lengths 126976 --kv int8 \
              --eager-tokens 0 --decode-tiles "$tiles" 2>> "$OUT/int8_long.err" \
              | grep tokens_per_s | tee -a "$OUT/int8_long.jsonl"
        done; done ;;
    *) echo "unknown step $what" >&2; exit 2 ;;
  esac
done
