#!/bin/bash
# The same A/B as run.sh on an idle machine (nothing else running: load_idle.txt, a copy of its load.txt), new = main after every change
# of the config schema and the value path (MoCHi in one file, strategies built once, content fingerprints),
# checked out at /work/wt_56b with /work/venv_56b; old = /work/wt_run (b232465) with /work/venv_run.
# Whole vision runs, 5 rounds, old/new interleaved with the order flipped each round; then the loss alone.
# ROUNDS, STRATEGIES and LOSS_RUNS (the loss alone's alternations) may be given: run_idle_more.sh.
set -u
ROUNDS=${ROUNDS-1 2 3 4 5} STRATEGIES=${STRATEGIES-mochi none} LOSS_RUNS=${LOSS_RUNS-1 2 3}
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=/work/wt_run/configs/vision/cpu_mochi_cifar10.yaml
COMMON="--set data.max_samples=2000 --set train.threads=1 --set train.precision=fp32 --set eval.at_end=false --set log.progress=false --set train.save_steps=0"
MOCHI="--set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128}]'"
NONE="--set 'loss.strategies=[{name: none}]'"
OUT=/tmp/ab56_idle
[ "$ROUNDS" = "1 2 3 4 5" ] && rm -rf $OUT
mkdir -p $OUT && cd /tmp
for i in $ROUNDS; do
  if [ $((i % 2)) = 1 ]; then ORDER="old new"; else ORDER="new old"; fi
  for s in $STRATEGIES; do
    for v in $ORDER; do
      if [ $v = old ]; then H=/work/venv_run/bin/hardmix; else H=/work/venv_56b/bin/hardmix; fi
      if [ $s = mochi ]; then S=$MOCHI; else S=$NONE; fi
      eval $H train vision $CFG --output $OUT/${s}_${v}_$i $COMMON $S > $OUT/${s}_${v}_$i.log 2>&1
      echo "$s $v $i $(cat /proc/loadavg)" >> $OUT/load.txt
    done
  done
done
for i in $LOSS_RUNS; do
  /work/venv_run/bin/python -P $HERE/loss_ab.py old >> $OUT/loss.jsonl
  /work/venv_56b/bin/python -P $HERE/loss_ab.py new >> $OUT/loss.jsonl
done
