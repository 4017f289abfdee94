"""result_pinned.json from /tmp/ab56_pinned (run_pinned.sh's runs, old and new at the same time on the two
cores): each run's training seconds (results.json wall_seconds), medians, paired new - old per round, the
paired t-test and Wilcoxon signed-rank p, and the load average after each round (load_pinned.txt)."""

import json
import statistics
import sys
from pathlib import Path

from scipy import stats

src = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ab56_pinned")
rounds = {"mochi": range(1, 21), "none": range(1, 11)}  # MoCHi: rounds 11 to 20 run after the first 10
seconds = {f"{s}_{v}": [json.loads((src / f"{s}_{v}_{i}" / "results.json").read_text())["wall_seconds"]
                        for i in rounds[s]] for s in rounds for v in ("old", "new")}
pairs = {s: (seconds[f"{s}_new"], seconds[f"{s}_old"]) for s in rounds}
print(json.dumps({
    "what": "run_pinned.sh: training seconds (results.json wall_seconds) of whole vision runs of "
            "cpu_mochi_cifar10.yaml with data.max_samples=2000 (31 steps of batch 64), MoCHi (512, 512, 128) "
            "from the first step (20 rounds) or none (10 rounds), one thread, fp32; each round runs old and "
            "new at the same time, each pinned to one core, the cores swapped each round; old = the code "
            "before MoCHi moved into one file, new = main after the config schema, the value path and "
            "content fingerprints",
    "machine": "2-core VM (AMD EPYC), torch 2.14.1, Python 3.11.7, 2026-12-05 UTC; nothing else running",
    "seconds": seconds,
    "median": {k: statistics.median(v) for k, v in seconds.items()},
    "new_over_old": {s: round(statistics.median(n) / statistics.median(o), 3) for s, (n, o) in pairs.items()},
    "paired_new_minus_old": {s: [round(a - b, 3) for a, b in zip(n, o)] for s, (n, o) in pairs.items()},
    "new_slower_in": {s: f"{sum(a > b for a, b in zip(n, o))} of {len(n)}" for s, (n, o) in pairs.items()},
    "paired_p": {s: {"t_test": round(float(stats.ttest_rel(n, o).pvalue), 4),
                     "wilcoxon": round(float(stats.wilcoxon(n, o).pvalue), 4)}
                 for s, (n, o) in pairs.items()},
}, indent=1))
