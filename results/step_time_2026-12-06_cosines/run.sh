#!/bin/bash
# The mixing step against the plain one on one tree (2026-12-06, after the temperature moved into the loss
# and the summary, spec and task hooks were regrouped): the repository's own step benchmarks at one torch
# thread, fp32, rounds of vision then text. Usage, from the repository root:
#   ROUNDS=6 bash results/step_time_2026-12-06_cosines/run.sh   (FIRST=4 ROUNDS=6: rounds 4 to 6 only)
# then `python benchmarks/step_ratio.py results/step_time_2026-12-06_cosines > .../summary.json`.
set -u
OUT="results/step_time_2026-12-06_cosines/ab"
mkdir -p "$OUT"
export HARDMIX_DATA=${HARDMIX_DATA:-/work/shared/data}
for r in $(seq "${FIRST:-1}" "$ROUNDS"); do
  for kind in vision text; do
    (date -u +%FT%TZ; cat /proc/loadavg) > "$OUT/round${r}_new_$kind.load_before"
    if [ "$kind" = vision ]; then
      python3 benchmarks/vision_throughput.py --no-pil --threads 1 --steps 10 --warmup 2 \
        --only "none (MoCo-v2)" "mochi, tensor" --json "$OUT/round${r}_new_vision.json" \
        > "$OUT/round${r}_new_vision.log" 2>&1
    else
      python3 benchmarks/text_throughput.py --variants none mixcse --threads 1 --rounds 4 --steps 2 \
        --no-memory --out "$OUT/round${r}_new_text.json" > "$OUT/round${r}_new_text.log" 2>&1
    fi
    (date -u +%FT%TZ; cat /proc/loadavg) > "$OUT/round${r}_new_$kind.load_after"
  done
done
