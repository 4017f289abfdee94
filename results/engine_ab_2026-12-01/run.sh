#!/bin/bash
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1
T="--set train.max_steps=30 --set eval.eval_steps=0 --set eval.at_end=false --set log.progress=false --set train.save_steps=0 --set data.train_file=wiki/wiki1m-head-11914.txt"
M="--set data.max_samples=2000 --set 'loss.strategies=[{name: mochi, n_hard: 512, n_pair: 512, n_query: 128, warmup_epochs: 0.2}]'"
for i in 1 2 3; do
 for v in old new; do
  rm -rf /tmp/ab/t_${v}_$i /tmp/ab/v_${v}_$i
  if [ $v = old ]; then
   (cd /work/old && eval /work/venv_old/bin/hardmix train text configs/text/cpu_mixcse.yaml --output /tmp/ab/t_old_$i $T --set train.cpu_threads=1 >/dev/null 2>&1)
   (cd /work/old && eval /work/venv_old/bin/hardmix train vision configs/vision/cpu_mochi_cifar10.yaml --output /tmp/ab/v_old_$i $M --set eval.knn_final=false --set train.progress=false --set train.save_every_epochs=0 >/dev/null 2>&1)
  else
   (cd /work/main && eval hardmix train text configs/text/cpu_mixcse.yaml --output /tmp/ab/t_new_$i $T --set train.threads=1 >/dev/null 2>&1)
   (cd /work/main && eval hardmix train vision configs/vision/cpu_mochi_cifar10.yaml --output /tmp/ab/v_new_$i $M --set eval.at_end=false --set log.progress=false --set train.save_steps=0 >/dev/null 2>&1)
  fi
 done
done
python3 - <<'PY'
import json, statistics as st
r={}
for kind in "tv":
  for v in ("old","new"):
    xs=[]
    for i in (1,2,3):
      d=f"/tmp/ab/{kind}_{v}_{i}"
      try: j=json.load(open(d+"/results.json"))
      except FileNotFoundError: j=json.load(open(d+"/summary.json"))
      xs.append(j.get("train_seconds_this_session") or j.get("wall_seconds") or j.get("seconds"))
    r[f"{kind}_{v}"]=xs
print(json.dumps(r))
for k in "tv": print(k, "old", st.median(r[k+"_old"]), "new", st.median(r[k+"_new"]), "ratio", round(st.median(r[k+"_new"])/st.median(r[k+"_old"]),3))
PY
