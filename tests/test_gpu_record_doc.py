"""docs/performance.md's "GPU check" quotes the first GPU run's records (``results/gpu_check_2026-12-06``)
as they are: every row of its tables is rebuilt here from the committed JSON, the budget's measured and
projected seconds from ``benchmarks/gpu_budget.py``, its estimate from the estimate recorded before the
run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results/gpu_check_2026-12-06"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _section() -> str:
    text = (ROOT / "docs/performance.md").read_text()
    return text.split("## GPU check")[1].split("\n## ")[0]


def _load(name: str) -> dict:
    return json.loads((RECORD / name).read_text())


def _rate(x: float) -> str:
    return f"{x:,.0f}"


def stage_rows() -> list[str]:
    s = _load("gpu_check.json")
    return [f"| `{name}` | {e['status']} | {e['seconds']:.1f} | {e['cap_s']} |"
            for name, e in s["stages"].items()]


def step_rows(name: str, unit: str) -> list[str]:
    rows = []
    for group, e in _load(name)["groups"].items():
        for r in e["rows"]:
            ratio = "1" if r["variant"] == "floor" else f"{r['vs_floor']:.2f}"
            ms = 1000 * r["median_step_s"]
            rows.append(f"| {group} | {r['variant']} | {ms:.1f} | {_rate(r['items_per_s'])} | {ratio} |")
    return rows


def budget_rows() -> list[str]:
    import gpu_budget

    estimate = {}
    for line in (RECORD / "budget_estimate.md").read_text().splitlines()[2:]:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        estimate[cells[0]] = cells[1]
    rows = []
    for m in gpu_budget.measured():
        was = "-" if m["measured_s"] is None else f"{m['measured_s']:.1f}"
        rows.append(f"| {m['stage']} | {estimate.get(m['stage'], '-')} | {was} | {m['projected_s']:.1f} | "
                    f"{m['cap_s']} |")
    return rows


def test_the_machine_and_the_run_are_quoted() -> None:
    doc = " ".join(_section().split())
    s = _load("gpu_check.json")
    env = s["environment"]
    machine = f"One {env['gpus'][0]}, torch {env['torch']}, Python {env['python']}, {env['cpu_count']} CPU"
    assert machine in doc
    setup = 360 - s["budget_s"]
    assert f"{s['seconds']} s for the stages after {setup:.0f} s of set-up" in doc
    assert f"failed: `{'`, `'.join(s['failed_stages'])}`" in doc


def test_every_stage_and_step_row_is_quoted_from_the_json() -> None:
    doc = _section()
    for row in stage_rows() + step_rows("text_steps.json", "sentences/s") + step_rows("vision_steps.json",
                                                                                      "images/s"):
        assert row in doc, row


def test_the_rates_around_the_steps_are_quoted() -> None:
    doc = " ".join(_section().split())
    v = _load("vision_steps.json")
    aug = {g: e["augment_only_images_per_s"] for g, e in v["groups"].items()}
    assert f"augmentation alone: {_rate(aug['resnet18-32'])} images/s at 32 px" in doc
    assert f"{_rate(aug['resnet50-224'])} at 224 px" in doc
    r18 = {r["variant"]: r for r in v["groups"]["resnet18-32"]["rows"]}
    batch_ms = 256 / aug["resnet18-32"] * 1000  # a batch of 256 images, both views
    assert f"{batch_ms:.0f} ms of the {1000 * r18['none']['median_step_s']:.0f} ms step" in doc
    pil = v["pil_pinned"]
    rate = _rate(pil["images_per_s"])
    assert f"PIL path with pinned memory: {rate} images/s on {pil['workers']} workers" in doc
    t = _load("training.json")
    runs = t["runs"]
    assert (f"the real trainer: {_rate(runs['mocov2']['images_per_s'])} images/s (MoCo-v2), "
            f"{_rate(runs['mochi']['images_per_s'])} (MoCHi)") in doc


def test_the_budget_is_the_measured_one_beside_the_estimate() -> None:
    import gpu_budget
    import gpu_check

    doc = _section()
    for row in budget_rows():
        assert row in doc, row
    rows = gpu_budget.measured()
    total = sum(m["projected_s"] for m in rows)
    measured = sum(m["measured_s"] or 0 for m in rows)
    caps = sum(gpu_check.CAPS.values()) + gpu_check.SETUP_S
    assert f"| **total** | **219 to 287** | **{measured:.1f}** | **{total:.1f}** | **{caps}** |" in doc


def test_the_losses_alone_are_quoted() -> None:
    doc = " ".join(_section().split())
    cases = _load("loss_overhead.json")["cases"]
    ms = [1000 * c["median_s"] for c in cases]
    assert f"take {min(ms):.1f} to {max(ms):.0f} ms at the papers' shapes" in doc


def _ops_section() -> str:
    return " ".join(_section().split("### The vision step's operators")[1].split())


def test_the_vision_step_operators_before_and_after_are_quoted() -> None:
    rec = json.loads((ROOT / "results/vision_step_ops_2026-12-06/ops.json").read_text())
    doc = _ops_section()
    before, after = rec["before_summary"], rec["after_summary"]
    assert rec["same_views"] and "the same views bit for bit" in doc
    for key, label in (("aten_ops_per_batch", "operators per augmentation batch (both views)"),
                       ("transfer_calls_per_batch", "copies to the images' device per batch"),
                       ("aten_ops_per_step", "operators per vision `none` step"),
                       ("floor_aten_ops_per_step", "operators per floor step")):
        assert f"| {label} | {before[key]:,} | {after[key]:,} |" in doc, label
    for key, label in (("images_per_cpu_s", "augmentation images per CPU second"),
                       ("images_per_s", "augmentation images per wall second")):
        assert f"| {label} | {before[key]:,.0f} | {after[key]:,.0f} |" in doc, label
    # the ratio expected on the GPU: the measured one, scaled by the operators per step
    v = _load("vision_steps.json")["groups"]["resnet18-32"]
    none = next(r for r in v["rows"] if r["variant"] == "none")
    share = after["aten_ops_per_step"] / before["aten_ops_per_step"]
    assert f"{none['vs_floor']:.2f}x x {share:.3f} = {none['vs_floor'] * share:.2f}x" in doc
    per_op_none = 1000 * none["median_step_s"] / before["aten_ops_per_step"]
    floor = next(r for r in v["rows"] if r["variant"] == "floor")
    per_op_floor = 1000 * floor["median_step_s"] / before["floor_aten_ops_per_step"]
    quoted = f"{1000 * per_op_none:.1f} us per operator in the `none` step, {1000 * per_op_floor:.1f} in"
    assert quoted + " the floor" in doc
    load = rec["machine"]
    assert f"load {load['load_before'][0]:.1f} before and {load['load_after'][0]:.1f} after" in doc


def test_the_dry_run_with_eight_stages_is_quoted() -> None:
    rec = json.loads((ROOT / "results/gpu_check_dry_2026-12-06/gpu_check.json").read_text())
    doc = " ".join(_section().split())
    assert rec["mode"] == "dry" and rec["failed_stages"] == [] and len(rec["stages"]) == 8
    cpu = sum(e["cpu_s"] for e in rec["stages"].values())
    assert f"all ok, the stages in {rec['seconds']} s, {cpu:.1f} s of CPU" in doc
