#!/bin/bash
# usage: grid.sh NAME "overrides..." [NAME "overrides..."] ...  (HARDMIX_DATA holds images/cifar10)
# Runs each point of the CPU vision config after another, scored on the validation split only.
export OMP_NUM_THREADS=1
cd "$(git rev-parse --show-toplevel)"
mkdir -p "${TUNE_DIR:-/tmp/vision_val_tuning}/runs"
BASE="data.max_samples=10000 data.val_samples=5000 eval.knn_train_samples=5000 eval.final_scores=[] train.save_steps=0 log.progress=false"
while [ $# -gt 0 ]; do
  name=$1; ov=$2; shift 2
  out=${TUNE_DIR:-/tmp/vision_val_tuning}/runs/$name
  [ -f $out/results.json ] && continue
  S=""; for o in $BASE $ov; do S="$S --set $o"; done
  echo "$(date -u +%T) start $name: $ov (load $(cut -d' ' -f1-3 /proc/loadavg))" >> ${TUNE_DIR:-/tmp/vision_val_tuning}/log.txt
  /usr/bin/time -v hardmix train vision configs/vision/cpu_mocov2_cifar10.yaml --output $out $S > ${TUNE_DIR:-/tmp/vision_val_tuning}/$name.out 2>&1
  echo "$(date -u +%T) end $name rc=$? (load $(cut -d' ' -f1-3 /proc/loadavg))" >> ${TUNE_DIR:-/tmp/vision_val_tuning}/log.txt
done
