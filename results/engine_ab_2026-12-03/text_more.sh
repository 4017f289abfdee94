#!/bin/bash
export HARDMIX_DATA=/work/shared/data OMP_NUM_THREADS=1 PYTHONSAFEPATH=1
T="--set train.max_steps=30 --set eval.eval_steps=0 --set eval.at_end=false --set log.progress=false --set train.save_steps=0 --set train.threads=1 --set train.precision=fp32 --set data.train_file=wiki/wiki1m-head-11914.txt"
for i in 6 7 8 9; do
 for v in new old; do
  if [ $v = old ]; then D=/work/wt44-transfer; H=/work/venv44-transfer/bin/hardmix; else D=/work/main; H=hardmix; fi
  rm -rf /tmp/ab/t_${v}_$i
  (cd $D && eval $H train text configs/text/cpu_mixcse.yaml --output /tmp/ab/t_${v}_$i $T >/tmp/ab/t_${v}_$i.log 2>&1)
 done
done
python3 - <<'PY'
import json, statistics as st
r={v:[json.load(open(f"/tmp/ab/t_{v}_{i}/results.json"))["wall_seconds"] for i in range(1,10)] for v in ("old","new")}
print(json.dumps(r)); print("median old", st.median(r["old"]), "new", st.median(r["new"]), "ratio", round(st.median(r["new"])/st.median(r["old"]),3))
PY
