"""Every look disclosed: a comparison grown by ``--resume`` records each growth (date, what it added,
whether its results had been seen) and its summary shows them; arms that differ in more than their
strategy (loss direction, precision, steps, grid size) are named beside the verdicts they touch, and
``arm_differences: equalize`` refuses to report them. On the committed ``compare_peak_fair`` records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from hardmix.cli import main as cli
from hardmix.compare.folder import GROWTH
from hardmix.compare.report import learned_notes
from hardmix.compare.resume import read_growth, record_growth, spec_additions
from hardmix.compare.summary import arm_differences
from hardmix.compare.summary_types import CodeTable, ComparisonSummary, Growth
from hardmix.compare.tables import verdict_text
from hardmix.training import read_results

ROOT = Path(__file__).resolve().parents[2]
PEAK_FAIR = ROOT / "results" / "compare_peak_fair"


def test_each_growth_is_recorded_with_its_date_and_what_it_added(tmp_path):
    old = {"seeds": [1, 2, 3], "baseline": "none", "strategies": {"none": [{"name": "none"}]},
           "tasks": {"vision": {"config": "v.yaml", "seeds": [1, 2]}},
           "tune": {"seeds": [101], "grid": {"none": {"loss.temperature": [0.1, 0.2]}}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(old))
    assert record_growth(tmp_path, old) is None and not (tmp_path / GROWTH).exists()  # nothing added
    grown = yaml.safe_load(yaml.safe_dump(old))
    grown["tasks"]["vision"]["seeds"] += [3, 4]
    grown["tune"]["grid"]["none"]["loss.temperature"].append(0.4)
    grown["strategies"]["dcl"] = [{"name": "dcl"}]
    assert spec_additions(old, grown) == ["strategies: dcl", "tasks.vision.seeds: 3, 4",
                                          "tune.grid.none.loss.temperature: 0.4"]
    entry = record_growth(tmp_path, grown)
    assert entry["after_results"] is False and entry["added"] == spec_additions(old, grown)
    (tmp_path / "summary.json").write_text("{}")  # its results seen: the next growth says so
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(grown))
    more = {**grown, "seeds": [1, 2, 3, 4, 5]}
    record_growth(tmp_path, more)
    growth = read_growth(tmp_path)
    assert [g["added"] for g in growth] == [entry["added"], ["seeds: 4, 5"]]
    assert [g["after_results"] for g in growth] == [False, True]
    notes = learned_notes(ComparisonSummary("none", [1], {}, [], {}, 0, 0, [], CodeTable({}, [], False),
                                            growth=[Growth.from_json(g) for g in growth]))
    assert notes[-1] == f"Grown on {growth[1]['date']}, after its results were seen: added seeds: 4, 5."


def _records(folder: Path) -> dict:
    runs = folder / "runs" / "text"
    return {s.name: {int(c.name.removeprefix("seed")): read_results(c) for c in s.iterdir()}
            for s in runs.iterdir()}


@pytest.mark.skipif(not PEAK_FAIR.is_dir(), reason="the committed compare_peak_fair records")
def test_the_committed_mixcse_arms_train_two_directions_and_say_so(tmp_path, capsys):
    recs = _records(PEAK_FAIR)
    both = {s: {r["task_info"]["both_directions"] for r in by_seed.values()} for s, by_seed in recs.items()}
    two = sorted(s for s, v in both.items() if v == {True})
    assert two == ["mixcse", "mixcse_lam0"] and both["none"] == {False}  # read from the records here
    differ = arm_differences(recs, "none")
    assert differ == {s: ["loss direction: two-direction vs one-direction"] for s in two}
    out = tmp_path / "cmp"
    shutil.copytree(PEAK_FAIR, out)
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tasks"]["text"]["arm_differences"] == differ
    typed = ComparisonSummary.from_json(summary)
    for s in summary["tasks"]["text"]["paired"]:
        said = "(differs: loss direction: two-direction vs one-direction)" in verdict_text(typed, "text", s)
        assert said is (s in two)
    assert "(differs: loss direction: two-direction vs one-direction)" in (out / "summary.md").read_text()
    start = summary["tasks"]["text"]["start"]  # older records: their start measured after the fact
    assert start["status"] == "measured" and start["source"].startswith("measured after the fact")
    # equalize: the spec asks for arms equal but for their strategy, so the verdicts are refused
    spec = yaml.safe_load((out / "spec.yaml").read_text())
    spec["arm_differences"] = "equalize"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    capsys.readouterr()
    assert cli(["compare", str(tmp_path / "spec.yaml"), "--output", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "arm_differences: equalize, but on text mixcse differs from none in loss direction" in err


def test_a_comparison_grown_with_resume_after_its_results_says_so(tmp_path, tiny_text_config, capsys,
                                                                    one_torch_thread):
    text = {**tiny_text_config, "train": {**tiny_text_config["train"], "max_steps": 2},
            "eval": {"eval_steps": 0, "at_end": True, "start": "selection"}}
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    spec = {"seeds": [1], "baseline": "none", "strategies": {"none": [{"name": "none"}]},
            "tasks": {"text": {"config": str(tmp_path / "text.yaml"), "score": "stsb_dev",
                               "allow_selection_score": True}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "cmp"
    assert cli(["compare", str(tmp_path / "spec.yaml"), "--output", str(out)]) == 0
    assert "growth" not in json.loads((out / "summary.json").read_text())  # never grown
    spec["seeds"] = [1, 2]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert cli(["compare", str(tmp_path / "spec.yaml"), "--output", str(out), "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    (growth,) = summary["growth"]
    assert growth["added"] == ["seeds: 2"] and growth["after_results"] is True
    assert growth == read_growth(out)[0]
    assert f"Grown on {growth['date']}, after its results were seen: added seeds: 2." in \
        (out / "summary.md").read_text()
    # each cell measured its start (eval.start: selection), so the start row has numbers
    start = summary["tasks"]["text"]["start"]
    assert start["status"] == "measured" and start["n"] == 2 and not start["depends_on_seed"]
    for seed in (1, 2):
        record = read_results(out / "runs" / "text" / "none" / f"seed{seed}")
        assert start["seeds"][str(seed)] == record["start_scores"]["stsb_dev"]

    # the same records without their start (an older hardmix's): --measure-start scores the pretrained
    # model once for both seeds (text's start does not depend on the seed, as the cells' own show above)
    # with the numbers the cells measured before their first step
    starts = {seed: read_results(out / "runs" / "text" / "none" / f"seed{seed}")["start_scores"]
              for seed in (1, 2)}
    for seed in (1, 2):
        path = out / "runs" / "text" / "none" / f"seed{seed}" / "results.json"
        record = json.loads(path.read_text())
        for k in ("start_scores", "start_scores_other", "learned"):
            record.pop(k, None)
        path.write_text(json.dumps(record))
    assert cli(["compare", str(tmp_path / "spec.yaml"), "--output", str(out), "--measure-start"]) == 0
    (file,) = (out / "start" / "text").glob("start_*.json")
    entry = json.loads(file.read_text())
    assert entry["seed"] is None and sorted(entry["cells"]) == ["text/none/seed1", "text/none/seed2"]
    for seed in (1, 2):
        assert entry["scores"]["stsb_dev"] == pytest.approx(starts[seed]["stsb_dev"], abs=1e-9)
    start = json.loads((out / "summary.json").read_text())["tasks"]["text"]["start"]
    assert start["seeds"] == {"1": entry["scores"]["stsb_dev"], "2": entry["scores"]["stsb_dev"]}
    assert start["source"].startswith("measured after the fact by --measure-start on ")
