"""Run ``hardmix train ...`` (the arguments after TAG OUT) under torch.profiler and write each torch op's
call count and self CPU milliseconds, the process's wall seconds and the run's training seconds to OUT (JSON).
Run by profile_ops.sh with the old and the new code's Python; ops_compare.py compares the two."""

import json
import sys
import time

from torch.profiler import ProfilerActivity, profile

from hardmix.cli import main

tag, out, *argv = sys.argv[1:]
with profile(activities=[ProfilerActivity.CPU]) as prof:
    start = time.perf_counter()
    rc = main(argv)
    wall = time.perf_counter() - start
ops = {e.key: [e.count, round(e.self_cpu_time_total / 1e3, 3)] for e in prof.key_averages()}
run = argv[argv.index("--output") + 1]
with open(f"{run}/results.json", encoding="utf-8") as f:
    training = json.load(f)["wall_seconds"]
with open(out, "w", encoding="utf-8") as f:
    json.dump({"tag": tag, "rc": rc, "process_seconds": round(wall, 3), "training_seconds": training,
               "ops": ops}, f)
