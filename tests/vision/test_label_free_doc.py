"""docs/selection_without_labels.md quotes the committed label-free comparison as its records say: the
table is the benchmark script's output, and every number of the prose is recomputed here from the runs'
own ``metrics.jsonl`` (NumPy and SciPy, not the script)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results/label_free_2026-12-04"
DOC = ROOT / "docs/selection_without_labels.md"


def _script():
    spec = importlib.util.spec_from_file_location("label_free_selection",
                                                  ROOT / "benchmarks/label_free_selection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _curves() -> dict[str, list[dict]]:
    out = {}
    for m in sorted(FOLDER.glob("runs/vision/*/seed*/metrics.jsonl")):
        rows = [json.loads(x) for x in m.read_text().splitlines()]
        out[f"{m.parent.parent.name}/{m.parent.name}"] = [r for r in rows if "val_proxy_top1" in r]
    return out


def test_the_table_is_the_script_s_output_of_the_records():
    text = DOC.read_text()
    block = re.search(r"<!-- label_free_selection: (\S+) -->\n(.*?)<!-- end of label_free_selection -->",
                      text, re.S)
    assert block and ROOT / block[1] == FOLDER
    script = _script()
    assert block[2].strip() == script.markdown(script.table(FOLDER)).strip()
    assert (FOLDER / "selection.md").read_text().strip() == block[2].strip()


def test_the_prose_recomputes_from_the_runs():
    curves = _curves()
    assert len(curves) == 9 and {len(c) for c in curves.values()} == {13}
    same, regret, regret_last, rho, proxy_range, proxy_se, knn_moved, within_two = 0, [], [], [], [], [], 0, 0
    d2 = 3.336  # the expected range of 13 standard normal draws (tabulated d2 of quality control)
    for rows in curves.values():
        knn = np.array([r["val_knn_top1"] for r in rows])
        proxy = np.array([r["val_proxy_top1"] for r in rows])
        i, j = int(np.argmax(knn)), int(np.argmax(proxy))  # argmax keeps the first of equals
        same += i == j
        regret.append(knn[i] - knn[j])
        regret_last.append(knn[i] - knn[-1])
        rho.append(spearmanr(knn, proxy).statistic)
        se = lambda p: 100 * np.sqrt(p / 100 * (1 - p / 100) / 500)  # noqa: E731
        proxy_range.append(proxy.max() - proxy.min())
        proxy_se.append(se(proxy[j]))
        assert proxy_range[-1] < d2 * proxy_se[-1]
        knn_moved += knn.max() - knn.min() > d2 * se(knn[i])
        within_two += regret[-1] <= 2 * se(knn[i])
    doc = " ".join(DOC.read_text().split())
    assert f"it chose the same step in {same} run of 9" in doc
    assert f"(median {np.median(rho):.2f})" in doc
    assert f"cost {np.mean(regret):.2f} points of validation k-NN on average" in doc
    assert f"than taking the last step ({np.mean(regret_last):.2f})" in doc
    assert f"({min(proxy_range):.1f} to {max(proxy_range):.1f} points against an SE of about 1)" in doc
    assert 0.9 < min(proxy_se) and max(proxy_se) < 1.2
    assert f"and the k-NN's too in {9 - knn_moved} runs of 9" in doc
    assert f"within two k-NN standard errors in {within_two} runs" in doc
    align = [(c[0]["val_alignment"], c[-1]["val_alignment"]) for c in curves.values()]
    unif = [(c[0]["val_uniformity"], c[-1]["val_uniformity"]) for c in curves.values()]
    assert (f"alignment rose from {min(a for a, _ in align):.2f}-{max(a for a, _ in align):.2f} to "
            f"{min(b for _, b in align):.2f}-{max(b for _, b in align):.2f} in every run") in doc
    assert all(b > a for a, b in align) and all(b < a for a, b in unif)
    assert (f"uniformity fell from between {min(a for a, _ in unif):.2f} and {max(a for a, _ in unif):.2f} "
            f"to between {min(b for _, b in unif):.2f} and {max(b for _, b in unif):.2f}") in doc
