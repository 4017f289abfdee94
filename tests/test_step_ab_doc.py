"""docs/performance.md's A/B of the step before and after MoCHi moved into one file quotes its records as
they are (``results/mochi_one_file_ab/result_pinned.json`` and ``result_ops.json``), and the
records say what the text concludes: no difference in the step's speed at the test's level."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results/mochi_one_file_ab"


def _paragraph() -> str:
    text = (ROOT / "docs/performance.md").read_text()
    return " ".join(text.split("**The same A/B on an idle machine**")[1].split("\n\n")[0].split())


def test_the_pinned_ab_is_quoted_and_within_noise() -> None:
    rec = json.loads((RECORDS / "result_pinned.json").read_text())
    doc = _paragraph()
    for s, rounds in (("mochi", 20), ("none", 10)):
        new, old = rec["seconds"][f"{s}_new"], rec["seconds"][f"{s}_old"]
        assert len(new) == len(old) == rounds
        assert rec["median"][f"{s}_new"] == statistics.median(new)
        p_t, p_w = stats.ttest_rel(new, old).pvalue, stats.wilcoxon(new, old).pvalue
        recorded = rec["paired_p"][s]
        assert (round(p_t, 4), round(p_w, 4)) == (recorded["t_test"], recorded["wilcoxon"])
        assert min(p_t, p_w) > 0.05  # within noise: what the text concludes
        slower = sum(a > b for a, b in zip(new, old, strict=True))
        assert rec["new_slower_in"][s] == f"{slower} of {rounds}"
        assert f"{statistics.median(new):.2f} s against {statistics.median(old):.2f} s" in doc
        assert f"{rounds} rounds, {slower} of {rounds} slower" in doc
    diffs = [a - b for a, b in zip(rec["seconds"]["mochi_new"], rec["seconds"]["mochi_old"], strict=True)]
    assert f"paired differences {min(diffs):.2f} to +{max(diffs):.2f} s" in doc
    mochi_p = rec["paired_p"]["mochi"]
    assert f"t-test p {mochi_p['t_test']:.2f}, Wilcoxon {mochi_p['wilcoxon']:.2f}" in doc


def test_the_op_profile_is_quoted() -> None:
    rec = json.loads((RECORDS / "result_ops.json").read_text())
    doc = _paragraph()
    ops = rec["ops_self_cpu_seconds"]
    assert f"spent {ops['old']:.2f} s (old) and {ops['new']:.2f} s (new) in torch's ops" in doc
    differ = rec["ops_whose_calls_differ"]
    extra = [v["new"][0] - v["old"][0] for v in differ.values()]
    assert f"{min(extra)} to {max(extra)} more calls of {len(differ)} small ones" in doc
    more_ms = sum(v["new"][1] - v["old"][1] for v in differ.values())
    assert f"{more_ms:.1f} ms more in all" in doc
    t = rec["training_seconds"]
    assert f"trained in {t['old']:.2f} s against {t['new']:.2f} s" in doc
