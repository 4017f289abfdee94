#!/bin/bash
# The step A/B of issue 67 (2026-12-06): the code before the change (869db83, the plug-in guards on every
# strategy) and after it (the guards on plug-ins only), interleaved, the order flipped each round; each run
# is the repository's own benchmark at one torch thread, fp32. OLD: a checkout of 869db83; NEW: this tree.
# Usage: OLD=/tmp/i67_old NEW=/work/wt-i67 ROUNDS=3 bash results/step_time_2026-12-06/run_ab.sh
# (then FIRST=4 ROUNDS=5 KINDS=vision for rounds 4 and 5 of vision alone)
set -u
OUT="$NEW/results/step_time_2026-12-06/ab"
mkdir -p "$OUT"
export HARDMIX_DATA=${HARDMIX_DATA:-/work/shared/data}
run() {  # $1 old|new, $2 vision|text, $3 round
  local tree; tree=$([ "$1" = old ] && echo "$OLD" || echo "$NEW")
  (date -u +%FT%TZ; cat /proc/loadavg) > "$OUT/round$3_$1_$2.load_before"
  if [ "$2" = vision ]; then
    (cd "$tree" && PYTHONPATH="$tree" python3 benchmarks/vision_throughput.py --no-pil --threads 1 --steps 10 \
      --warmup 2 --only "none (MoCo-v2)" "mochi, tensor" --json "$OUT/round$3_$1_vision.json") \
      > "$OUT/round$3_$1_vision.log" 2>&1
  else
    (cd "$tree" && PYTHONPATH="$tree" python3 benchmarks/text_throughput.py --variants none mixcse --threads 1 \
      --rounds 4 --steps 2 --no-memory --out "$OUT/round$3_$1_text.json") > "$OUT/round$3_$1_text.log" 2>&1
  fi
  (date -u +%FT%TZ; cat /proc/loadavg) > "$OUT/round$3_$1_$2.load_after"
}
for r in $(seq "${FIRST:-1}" "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for kind in ${KINDS:-vision text}; do
    for side in $order; do run "$side" "$kind" "$r"; done
  done
done
