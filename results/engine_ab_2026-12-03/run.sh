#!/bin/bash
# The training step before (d013808, /work/wt44-transfer) and after (main), one thread, same machine,
# the comparison's background cells paused (kill -STOP) while it runs.
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
T="--set train.max_steps=30 --set eval.eval_steps=0 --set eval.at_end=false --set log.progress=false --set train.save_steps=0 --set train.threads=1 --set train.precision=fp32 --set data.train_file=wiki/wiki1m-head-11914.txt"
M="--set data.max_samples=2000 --set train.threads=1 --set train.precision=fp32 --set eval.at_end=false --set log.progress=false --set train.save_steps=0 --set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128, warmup_epochs: 0.2}]'"
for i in 1 2 3 4 5; do
 for v in old new; do
  rm -rf /tmp/ab/t_${v}_$i /tmp/ab/v_${v}_$i
  if [ $v = old ]; then D=/work/wt44-transfer; H=/work/venv44-transfer/bin/hardmix; else D=/work/main; H=hardmix; fi
  (cd $D && eval $H train text configs/text/cpu_mixcse.yaml --output /tmp/ab/t_${v}_$i $T >/tmp/ab/t_${v}_$i.log 2>&1)
  (cd $D && eval $H train vision configs/vision/cpu_mochi_cifar10.yaml --output /tmp/ab/v_${v}_$i $M >/tmp/ab/v_${v}_$i.log 2>&1)
 done
done
python3 - <<'PY'
import json, statistics as st
r={}
for kind in "tv":
  for v in ("old","new"):
    r[f"{kind}_{v}"]=[json.load(open(f"/tmp/ab/{kind}_{v}_{i}/results.json"))["wall_seconds"] for i in range(1,6)]
print(json.dumps(r))
for k in "tv": print(k, "old", st.median(r[k+"_old"]), "new", st.median(r[k+"_new"]), "ratio", round(st.median(r[k+"_new"])/st.median(r[k+"_old"]),3))
PY
uptime
