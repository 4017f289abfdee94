"""docs/performance.md's step ratios (the mixing step against the plain one, the code before and
after the plug-in guards left the built-in strategies) are recomputed here from their committed records,
``results/step_time_2026-12-06/ab/`` (each run's own medians), by ``benchmarks/step_ratio.py``."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "results/step_time_2026-12-06"


def _step_ratio():
    spec = importlib.util.spec_from_file_location("step_ratio", ROOT / "benchmarks/step_ratio.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paragraph() -> str:
    text = (ROOT / "docs/performance.md").read_text()
    return " ".join(text.split("**The step after the plug-in guards left the built-ins**")[1].split("\n\n")[0]
                    .split())


def test_the_summary_is_the_records_and_the_doc_quotes_it() -> None:
    summary = _step_ratio().summarize(FOLDER)
    assert summary == json.loads((FOLDER / "summary.json").read_text())
    doc = _paragraph()
    for kind, plain, mixing in (("vision", "MoCo-v2", "MoCHi"), ("text", "SimCSE", "MixCSE")):
        for side in ("new", "old"):
            runs = summary[kind][side]["runs"]
            ratios = [r["ratio"] for r in runs]
            assert summary[kind][side]["median_ratio"] == statistics.median(ratios)
            # each run's ratio is its own medians' (interleaved inside the run)
            for r in runs:
                assert r["ratio"] == r["mixing_s"] / r["plain_s"]
            quoted = (f"{kind} {side}: {mixing} against {plain} {statistics.median(ratios):.3f}x "
                      f"(runs {min(ratios):.3f} to {max(ratios):.3f}, {len(ratios)} runs)")
            assert quoted in doc, quoted
    vision = [r[k] for s in summary["vision"].values() for r in s["runs"] for k in ("plain_s", "mixing_s")]
    assert f"a vision run's median step from {min(vision):.2f} to {max(vision):.2f} s" in doc
    loads = [r["load_1m_before"] for k in summary.values() for s in k.values() for r in s["runs"]]
    assert f"load average {min(loads):.1f} to {max(loads):.1f}" in doc


def test_the_step_after_the_temperature_moved_into_the_loss_is_its_record() -> None:
    folder = ROOT / "results/step_time_2026-12-06_cosines"
    summary = _step_ratio().summarize(folder)
    assert summary == json.loads((folder / "summary.json").read_text())
    text = (ROOT / "docs/performance.md").read_text()
    doc = " ".join(text.split("**The step after the temperature moved into the loss**")[1].split("\n\n")[0]
                   .split())
    for kind, plain, mixing in (("vision", "MoCo-v2", "MoCHi"), ("text", "SimCSE", "MixCSE")):
        ratios = [r["ratio"] for r in summary[kind]["new"]["runs"]]
        assert summary[kind]["new"]["median_ratio"] == statistics.median(ratios) <= 1.10
        quoted = (f"{kind}: {mixing} against {plain} {statistics.median(ratios):.3f}x "
                  f"(runs {min(ratios):.3f} to {max(ratios):.3f}, {len(ratios)} runs)")
        assert quoted in doc, quoted
    vision = [r[k] for r in summary["vision"]["new"]["runs"] for k in ("plain_s", "mixing_s")]
    assert f"a vision run's median step from {min(vision):.2f} to {max(vision):.2f} s" in doc
    loads = [r["load_1m_before"] for k in summary.values() for r in k["new"]["runs"]]
    assert f"load average {min(loads):.1f} to {max(loads):.1f}" in doc
