"""result_idle.json from /tmp/ab56_idle (run_idle.sh's runs): each run's training seconds (results.json
wall_seconds), medians, paired new - old per round, and the loss alone (median of the 3 alternations)."""

import json
import statistics
import sys
from pathlib import Path

from scipy import stats

src = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ab56_idle")
rounds = {"mochi": range(1, 11), "none": range(1, 6)}  # MoCHi: 5 more rounds (run_idle_more.sh)
seconds = {f"{s}_{v}": [json.loads((src / f"{s}_{v}_{i}" / "results.json").read_text())["wall_seconds"]
                        for i in rounds[s]] for s in ("mochi", "none") for v in ("old", "new")}
def step_clock(run: Path) -> tuple[float, float]:
    """The training seconds at the first logged step (10) and the seconds per step after it."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    (s0, w0), *_, (s1, w1) = [(r["step"], r["wall_seconds"]) for r in rows if "wall_seconds" in r]
    return w0, (w1 - w0) / (s1 - s0)


clock = {f"{s}_{v}": [step_clock(src / f"{s}_{v}_{i}") for i in rounds[s]]
         for s in ("mochi", "none") for v in ("old", "new")}
loss: dict[str, dict[str, list[float]]] = {}
for line in (src / "loss.jsonl").read_text().splitlines():
    row = json.loads(line)
    for case, ms in row["ms_per_call"].items():
        loss.setdefault(case, {}).setdefault(row["version"], []).append(ms)
out = {
    "what": "run_idle.sh: training seconds (results.json wall_seconds) of whole vision runs of "
            "cpu_mochi_cifar10.yaml with data.max_samples=2000 (31 steps of batch 64), MoCHi (512, 512, 128) "
            "from the first step (10 rounds) or none (5 rounds), one thread, fp32; old = the code before "
            "MoCHi moved into one file, new = main after the config schema, the value path and content "
            "fingerprints; old/new interleaved with the order flipped each round; then the loss alone "
            "(loss_ab.py), alternated 3 times",
    "machine": "2-core VM (AMD EPYC), torch 2.14.1, Python 3.11.7, 2026-12-05 UTC; nothing else running "
               "(load_idle.txt: the load average after each run)",
    "seconds": seconds,
    "median": {k: statistics.median(v) for k, v in seconds.items()},
    "new_over_old": {s: round(statistics.median(seconds[f"{s}_new"])
                              / statistics.median(seconds[f"{s}_old"]), 3) for s in ("mochi", "none")},
    "paired_new_minus_old": {s: [round(n - o, 3) for n, o in zip(seconds[f"{s}_new"], seconds[f"{s}_old"])]
                             for s in ("mochi", "none")},
    "paired_p": {s: {"t_test": round(float(stats.ttest_rel(*pair).pvalue), 4),
                     "wilcoxon": round(float(stats.wilcoxon(*pair).pvalue), 4)}
                 for s, pair in ((s, (seconds[f"{s}_new"], seconds[f"{s}_old"])) for s in ("mochi", "none"))},
    "median_seconds_at_step_10": {k: round(statistics.median(w for w, _ in v), 3) for k, v in clock.items()},
    "median_seconds_per_step_after": {k: round(statistics.median(r for _, r in v), 4)
                                      for k, v in clock.items()},
    "loss_alone_ms_per_call_median_of_3": {c: {v: statistics.median(x) for v, x in d.items()}
                                          for c, d in loss.items()},
}
print(json.dumps(out, indent=1))
