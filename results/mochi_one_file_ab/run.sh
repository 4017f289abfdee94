#!/bin/bash
# Old (main at b232465, /work/wt_run with /work/venv_run, read-only) against new (branch mochi56, /work/wt_56b
# with /work/venv_56b): whole vision training runs of cpu_mochi_cifar10.yaml (2,000 images, 31 steps, MoCHi
# (N, s, s') = (512, 512, 128) from the first step, or none), one thread, fp32, run from /tmp, interleaved
# old/new (ABAB, the order flipped every round); then the loss alone (loss_ab.py), alternated.
# The machine (2 cores) was shared with a running benchmark and other jobs: see result.json's load.
set -u
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=/work/wt_56b/configs/vision/cpu_mochi_cifar10.yaml
COMMON="--set data.max_samples=2000 --set train.threads=1 --set train.precision=fp32 --set eval.at_end=false --set log.progress=false --set train.save_steps=0"
MOCHI="--set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128}]'"
NONE="--set 'loss.strategies=[{name: none}]'"
OUT=/tmp/ab56
mkdir -p $OUT && cd /tmp
for i in 1 2 3 4 5; do
  if [ $((i % 2)) = 1 ]; then ORDER="old new"; else ORDER="new old"; fi
  for s in mochi none; do
    for v in $ORDER; do
      if [ $v = old ]; then H=/work/venv_run/bin/hardmix; else H=/work/venv_56b/bin/hardmix; fi
      if [ $s = mochi ]; then S=$MOCHI; else S=$NONE; fi
      rm -rf $OUT/${s}_${v}_$i
      eval $H train vision $CFG --output $OUT/${s}_${v}_$i $COMMON $S > $OUT/${s}_${v}_$i.log 2>&1
      echo "$s $v $i $(cat /proc/loadavg)" >> $OUT/load.txt
    done
  done
done
for i in 1 2 3; do
  /work/venv_run/bin/python -P $HERE/loss_ab.py old >> $OUT/loss.jsonl
  /work/venv_56b/bin/python -P $HERE/loss_ab.py new >> $OUT/loss.jsonl
done
