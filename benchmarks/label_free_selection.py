"""How well the label-free score picks the step the labelled one picks, from a comparison's records.

    python benchmarks/label_free_selection.py results/superseded/label_free_2026-12-04

reads every evaluation cell (``runs/<task>/<strategy>/seed<n>/metrics.jsonl``) of a comparison whose runs
scored both ``val_knn_top1`` and ``val_proxy_top1`` at each evaluation (``eval.label_free_scores: true``;
``configs/compare/label_free.yaml``) and writes ``selection.md`` (a table, one row a run) and
``selection.json`` beside them. Per run: the step each score selects (the first of equal best scores, as
the engine keeps it), the labelled score at both steps and the points lost by selecting without labels
(the regret), set against the validation k-NN's binomial standard error; how far each curve moves over the
run (max - min) against its own binomial standard error; and the Spearman rank correlation of the two
scores over the evaluated steps.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from scipy import integrate
from scipy.stats import norm, spearmanr

LABELLED, LABEL_FREE = "val_knn_top1", "val_proxy_top1"


def first_best(rows: list[dict], key: str) -> dict:
    """The evaluation with the highest ``key``, the first of equal ones (the engine keeps the first)."""
    best = rows[0]
    for r in rows[1:]:
        if r[key] > best[key]:
            best = r
    return best


def noise_range(n: int) -> float:
    """The expected range (max - min) of ``n`` independent standard normal draws (d2 of quality control):
    how far a curve of ``n`` evaluations moves, in standard errors, when only sampling noise moves it.

    >>> round(noise_range(2), 4), round(noise_range(13), 3)
    (1.1284, 3.336)
    """
    return integrate.quad(lambda x: 1 - norm.cdf(x) ** n - norm.sf(x) ** n, -12, 12)[0]


def cell_row(metrics: Path, n_val: int) -> dict:
    """The selection facts of one run's ``metrics.jsonl`` (``n_val`` validation images)."""
    rows = [json.loads(x) for x in metrics.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if LABELLED in r and LABEL_FREE in r]
    if len(rows) < 3:
        raise SystemExit(f"{metrics}: {len(rows)} evaluations with both {LABELLED} and {LABEL_FREE}")
    by_knn, by_proxy = first_best(rows, LABELLED), first_best(rows, LABEL_FREE)
    p, q = by_knn[LABELLED] / 100, by_proxy[LABEL_FREE] / 100
    knn, proxy = [r[LABELLED] for r in rows], [r[LABEL_FREE] for r in rows]
    rho = spearmanr(knn, proxy).statistic
    return {
        "run": f"{metrics.parent.parent.name}/{metrics.parent.name}",
        "evaluations": len(rows),
        "first_step": rows[0]["step"],
        "last_step": rows[-1]["step"],
        "step_labelled": by_knn["step"],
        "step_label_free": by_proxy["step"],
        "knn_at_labelled": by_knn[LABELLED],
        "knn_at_label_free": by_proxy[LABELLED],
        "regret": by_knn[LABELLED] - by_proxy[LABELLED],
        "regret_last": by_knn[LABELLED] - rows[-1][LABELLED],
        "knn_se": 100 * math.sqrt(p * (1 - p) / n_val),
        "knn_range": max(knn) - min(knn),
        "proxy_at_label_free": by_proxy[LABEL_FREE],
        "proxy_se": 100 * math.sqrt(q * (1 - q) / n_val),
        "proxy_range": max(proxy) - min(proxy),
        "spearman": float(rho),
    }


def table(folder: Path) -> dict:
    runs = sorted((folder / "runs").glob("*/*/seed*/metrics.jsonl"))
    if not runs:
        raise SystemExit(f"{folder}: no runs/<task>/<strategy>/seed<n>/metrics.jsonl")
    rows = []
    for m in runs:
        results = json.loads((m.parent / "results.json").read_text(encoding="utf-8"))
        rows.append(cell_row(m, int(results["task_info"]["val_samples"])))
    regrets = sorted(r["regret"] for r in rows)
    rhos = sorted(r["spearman"] for r in rows)
    n = len(rows)
    return {
        "rows": rows,
        "runs": n,
        "same_step": sum(r["step_labelled"] == r["step_label_free"] for r in rows),
        "noise_range": noise_range(rows[0]["evaluations"]),
        "proxy_resolved": sum(r["proxy_range"] > noise_range(r["evaluations"]) * r["proxy_se"] for r in rows),
        "knn_resolved": sum(r["knn_range"] > noise_range(r["evaluations"]) * r["knn_se"] for r in rows),
        "mean_regret_last": sum(r["regret_last"] for r in rows) / n,
        "within_one_se": sum(r["regret"] <= r["knn_se"] for r in rows),
        "within_two_se": sum(r["regret"] <= 2 * r["knn_se"] for r in rows),
        "mean_regret": sum(regrets) / n,
        "max_regret": regrets[-1],
        "median_spearman": (rhos[(n - 1) // 2] + rhos[n // 2]) / 2,
        "min_spearman": rhos[0],
    }


def markdown(t: dict) -> str:
    head = ("| run | evaluations (steps) | step by val_knn_top1 | step by val_proxy_top1 | "
            "val_knn_top1 there | at the label-free step | regret (points) | regret of the last step | "
            "k-NN SE | k-NN range | "
            "proxy there | proxy SE | proxy range | Spearman |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['run']} | {r['evaluations']} ({r['first_step']}-{r['last_step']}) | {r['step_labelled']} | "
        f"{r['step_label_free']} | {r['knn_at_labelled']:.2f} | {r['knn_at_label_free']:.2f} | "
        f"{r['regret']:.2f} | {r['regret_last']:.2f} | {r['knn_se']:.2f} | {r['knn_range']:.2f} | "
        f"{r['proxy_at_label_free']:.2f} | "
        f"{r['proxy_se']:.2f} | {r['proxy_range']:.2f} | {r['spearman']:.2f} |\n" for r in t["rows"])
    summary = (f"\n{t['runs']} runs: the same step in {t['same_step']}; the regret within one standard error "
               f"in {t['within_one_se']} and within two in {t['within_two_se']}; mean regret "
               f"{t['mean_regret']:.2f}, largest {t['max_regret']:.2f} points; Spearman median "
               f"{t['median_spearman']:.2f}, lowest {t['min_spearman']:.2f}. Taking the last step instead "
               f"loses {t['mean_regret_last']:.2f} points on average. Curves that move by more than sampling "
               f"noise alone would ({t['noise_range']:.2f} standard errors, the expected range of "
               f"{t['rows'][0]['evaluations']} draws): the k-NN's in {t['knn_resolved']}, the proxy's in "
               f"{t['proxy_resolved']}.\n")
    return head + body + summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a comparison's --output folder")
    args = ap.parse_args(argv)
    t = table(args.folder)
    (args.folder / "selection.json").write_text(json.dumps(t, indent=1) + "\n", encoding="utf-8")
    text = markdown(t)
    (args.folder / "selection.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
