#!/usr/bin/env bash
# The warm-up bridge on the reference stack's TPS: fresh boots, the bridge on (WARMUP_NUM_PROMPTS=64, the winning
# entry's count, WARMUP_MAX_TOKENS=1, WARMUP_SEED=42) and off (0), in ABBA order so that drift hits both alike.
# Each boot: engine.bench's warm-up (2 x 8 tokens, the quick profile's), one timed run of 8 public prompts x 64
# tokens (a fresh boot's first run, as a private re-run is), PPL over 4 records. Run from the checkout.
set -euo pipefail
out=${1:-runs/bench/warmup-bridge}
mkdir -p "$out"
i=0
for n in 64 0 0 64 64 0 0 64 64 0 0 64; do
  i=$((i + 1))
  .venv/bin/python -m engine.bench --manifest reference --profile quick --num-prompts 8 --repeats 1 \
    --set warmup_prompts=$n --json --workdir "$out/boot-$i" > "$out/boot-$i.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); m=r['measurement']; print(sys.argv[2], sys.argv[3], round(m['tps'], 3), round(r['timings_s']['boot'], 1), round(m['ppl'], 4))" \
    "$out/boot-$i.json" "$i" "$n" | tee -a "$out/boots.txt"
done
