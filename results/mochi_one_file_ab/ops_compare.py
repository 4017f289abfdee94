"""result_ops.json from profile_ops.sh's two profiles: the total self CPU seconds of every torch op, the ops
whose call counts differ, and the 10 ops whose self time differs most (old and new: [calls, self ms])."""

import json
import sys
from pathlib import Path

src = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ab56_ops")
old, new = (json.loads((src / f"ops_{v}.json").read_text(encoding="utf-8")) for v in ("old", "new"))
names = sorted(set(old["ops"]) | set(new["ops"]))
pairs = {k: (old["ops"].get(k, [0, 0.0]), new["ops"].get(k, [0, 0.0])) for k in names}
by_time = sorted(pairs, key=lambda k: abs(pairs[k][1][1] - pairs[k][0][1]), reverse=True)
print(json.dumps({
    "what": "profile_ops.sh: one MoCHi run (512/512/128, 31 steps, one thread, fp32) of each under "
            "torch.profiler; self CPU time of every torch op of the process (startup and data included)",
    "machine": "2-core VM (AMD EPYC), torch 2.14.1, Python 3.11.7, 2026-12-05 UTC, nothing else running",
    "training_seconds": {"old": old["training_seconds"], "new": new["training_seconds"]},
    "process_seconds": {"old": old["process_seconds"], "new": new["process_seconds"]},
    "ops_self_cpu_seconds": {v: round(sum(ms for _, ms in d["ops"].values()) / 1e3, 3)
                             for v, d in (("old", old), ("new", new))},
    "ops_whose_calls_differ": {k: {"old": o, "new": n} for k, (o, n) in pairs.items() if o[0] != n[0]},
    "largest_self_time_differences": {k: {"old": pairs[k][0], "new": pairs[k][1]} for k in by_time[:10]},
}, indent=1))
