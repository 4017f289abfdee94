#!/bin/bash
# One profiled MoCHi run of each (old then new; profile_ops.py), the config and settings of run_idle.sh;
# then ops_compare.py > result_ops.json. Nothing else running.
set -u
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=/work/wt_run/configs/vision/cpu_mochi_cifar10.yaml
OUT=${OUT-/tmp/ab56_ops}
mkdir -p $OUT && cd /tmp
for v in old new; do
  if [ $v = old ]; then P=/work/venv_run/bin/python; else P=/work/venv_56b/bin/python; fi
  rm -rf $OUT/run_$v
  $P $HERE/profile_ops.py $v $OUT/ops_$v.json train vision $CFG --output $OUT/run_$v \
    --set data.max_samples=2000 --set train.threads=1 --set train.precision=fp32 --set eval.at_end=false \
    --set log.progress=false --set train.save_steps=0 \
    --set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128}]' > $OUT/$v.log 2>&1
done
python3 $HERE/ops_compare.py $OUT > $HERE/result_ops.json
