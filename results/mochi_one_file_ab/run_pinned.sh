#!/bin/bash
# The A/B of run_idle.sh with old and new running at the same time, each pinned to one of the 2 cores (taskset),
# the cores swapped each round: both meet the same machine at the same moment, so a slow minute of the VM
# slows both (run_idle.sh's runs, one after the other, drifted by up to 1.7 s between rounds).
# new = main at /work/wt_56b with /work/venv_56b; old = /work/wt_run (b232465) with /work/venv_run.
# ROUNDS and STRATEGIES may be given.
set -u
ROUNDS=${ROUNDS-1 2 3 4 5 6 7 8 9 10} STRATEGIES=${STRATEGIES-mochi none}
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
CFG=/work/wt_run/configs/vision/cpu_mochi_cifar10.yaml
COMMON="--set data.max_samples=2000 --set train.threads=1 --set train.precision=fp32 --set eval.at_end=false --set log.progress=false --set train.save_steps=0"
MOCHI="--set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128}]'"
NONE="--set 'loss.strategies=[{name: none}]'"
OUT=${OUT-/tmp/ab56_pinned}
mkdir -p $OUT && cd /tmp
for i in $ROUNDS; do
  for s in $STRATEGIES; do
    if [ $s = mochi ]; then S=$MOCHI; else S=$NONE; fi
    for v in old new; do
      if [ $v = old ]; then H=/work/venv_run/bin/hardmix; else H=/work/venv_56b/bin/hardmix; fi
      if [ $v = old ]; then CORE=$((i % 2)); else CORE=$(((i + 1) % 2)); fi
      rm -rf $OUT/${s}_${v}_$i
      eval taskset -c $CORE $H train vision $CFG --output $OUT/${s}_${v}_$i $COMMON $S > $OUT/${s}_${v}_$i.log 2>&1 &
    done
    wait
    echo "$s $i $(cat /proc/loadavg)" >> $OUT/load.txt
  done
done
