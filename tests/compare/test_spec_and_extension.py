"""``hardmix compare``'s input side: held-out scores by construction, the ``tune:`` block's validation, a
finished comparison extended by seeds and strategies with ``--resume`` (tiny real runs: only the new cells
train, the finished cells' files stay byte for byte), what a finished cell keeps, corrupt records, the lock,
and the progress bar in steps."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hardmix.cli import main as cli
from hardmix.compare.grid import build_grid
from hardmix.compare.spec import parse_spec
from hardmix.compare.tuning import tuning_cells
from hardmix.training import read_results
from hardmix.training.api import resolve_task
from hardmix.utils.errors import ConfigError


@pytest.fixture
def text_spec(tmp_path, tiny_text_config):
    """A spec of tiny real text runs (4 steps, STS-B dev at the end): one strategy, one seed."""
    text = copy.deepcopy(tiny_text_config)
    text["train"].update(max_steps=4, save_steps=2)
    text["eval"].update(at_end=True)
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    return {
        "seeds": [1],
        "baseline": "none",
        "strategies": {"none": [{"name": "none"}]},
        "tasks": {"text": {"config": str(tmp_path / "text.yaml"), "score": "stsb_dev",
                           "allow_selection_score": True}},
    }


def _write(tmp_path, spec, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


# ---------------------------------------------------------------------------------- held-out scores
def test_the_selection_score_is_refused_before_any_run_unless_allowed(text_spec, tmp_path, capsys):
    spec = copy.deepcopy(text_spec)
    del spec["tasks"]["text"]["allow_selection_score"]
    with pytest.raises(ConfigError, match=r"^tasks\.text\.score: 'stsb_dev' is the task's selection score"):
        build_grid(parse_spec(spec), tmp_path / "out")
    path = _write(tmp_path, spec)
    assert cli(["compare", str(path), "--output", str(tmp_path / "out"), "--print-commands"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tasks.text.allow_selection_score: true" in err
    assert not (tmp_path / "out").exists()
    allowed = parse_spec(text_spec)
    assert len(build_grid(allowed, tmp_path / "out")) == 1 and allowed.tasks["text"].allow_selection_score
    spec["tasks"]["text"]["allow_selection_score"] = "yes"
    with pytest.raises(ConfigError, match=r"tasks\.text\.allow_selection_score: expected true or false"):
        parse_spec(spec)


def test_the_compared_score_defaults_to_the_task_s_held_out_score(text_spec, tmp_path):
    spec = copy.deepcopy(text_spec)
    del spec["tasks"]["text"]["score"], spec["tasks"]["text"]["allow_selection_score"]
    task_cls = resolve_task("text")
    parsed = parse_spec(spec)
    if not task_cls.default_score:
        with pytest.raises(ConfigError, match=r"tasks\.text\.score: missing"):
            build_grid(parsed, tmp_path / "out", check_data=False)
        return
    cells = build_grid(parsed, tmp_path / "out", check_data=False)
    assert parsed.tasks["text"].score == task_cls.default_score != task_cls.selection_metric
    from hardmix.training.api import load_config_for

    for cell in cells:  # the evaluation the score needs is on in the cell's own command
        cfg = load_config_for(task_cls, cell.task.config, cell.overrides)
        assert task_cls.default_score in task_cls.about(cfg).score_names()
        assert set(parsed.tasks["text"].secondary) <= set(task_cls.about(cfg).score_names())


def test_secondary_scores_are_checked(text_spec, tmp_path):
    spec = copy.deepcopy(text_spec)
    spec["tasks"]["text"]["secondary"] = ["sts_avg"]
    spec["tasks"]["text"]["set"] = {"eval.final_sts": True}
    parsed = parse_spec(spec)
    build_grid(parsed, tmp_path / "out", check_data=False)
    assert parsed.tasks["text"].secondary == ["sts_avg"]
    spec["tasks"]["text"]["secondary"] = ["sts_avgg"]
    with pytest.raises(ConfigError, match=r"tasks\.text\.secondary: 'sts_avgg' is not a final score"):
        build_grid(parse_spec(spec), tmp_path / "out", check_data=False)
    spec["tasks"]["text"]["secondary"] = "sts_avg"
    with pytest.raises(ConfigError, match=r"tasks\.text\.secondary: expected a list"):
        parse_spec(spec)


# ------------------------------------------------------------------------------------ the tune block
@pytest.mark.parametrize(
    "tune, message",
    [
        # one error format for every config (hardmix.config.loader): the key in full, then the section's keys
        ({"seeds": [7], "grid": {"none": {}}, "budget": 3},
         r"unknown key tune\.budget \(known keys of tune: seeds, grid, tasks, equal_budget\)"),
        ({"seeds": [1], "grid": {"none": {}, "mixcse": {}}}, r"tune\.seeds: 1 is also an evaluation seed"),
        ({"seeds": [7, 7], "grid": {"none": {}}}, r"tune\.seeds: \[7, 7\] repeats a seed"),  # as seeds
        ({"seeds": [7], "grid": {"none": {}, "mochi": {}}}, r"tune\.grid\.mochi: not one of the strategies"),
        ({"seeds": [7], "grid": {"none": {"loss.temperature": 0.1}, "mixcse": {}}},
         r"tune\.grid\.none\.loss\.temperature: expected a non-empty list"),
        ({"seeds": [7], "grid": {"none": {"mixcse.lam": [0.1]}, "mixcse": {}}},
         r"tune\.grid\.none\.mixcse\.lam: none's entries are none, not mixcse"),
        ({"seeds": [7], "grid": {"none": {"loss.temperature": [0.05, 0.1]}, "mixcse": {"mixcse.lam": [0.1]}}},
         r"tune\.grid: the strategies' grids differ in size \(none 2, mixcse 1 points\)"),
        ({"seeds": [7], "grid": {"mixcse": {"mixcse.lam": [0.1]}}}, r"tune\.grid: none has no grid"),
        ({"seeds": [7], "grid": {"none": {}, "mixcse": {}}, "tasks": ["audio"]}, r"tune\.tasks: expected"),
    ],
)
def test_the_tune_block_is_validated(text_spec, tune, message):
    spec = copy.deepcopy(text_spec)
    spec["strategies"]["mixcse"] = [{"name": "mixcse", "lam": 0.2}]
    spec["tune"] = tune
    with pytest.raises(ConfigError, match=message):
        parse_spec(spec)


def test_every_tuning_point_s_config_is_validated_before_any_run(text_spec, tmp_path):
    spec = copy.deepcopy(text_spec)
    spec["strategies"]["mixcse"] = [{"name": "mixcse", "lam": 0.2}]
    spec["tune"] = {"seeds": [7, 8], "grid": {"none": {"loss.temperature": [0.05, 0.1]},
                                                "mixcse": {"mixcse.lam": [0.1, 2.0]}}}
    with pytest.raises(ConfigError, match=r"tasks\.text with strategy mixcse at tune point .*lam"):
        tuning_cells(parse_spec(spec), tmp_path / "out")
    spec["tune"]["grid"]["mixcse"] = {"mixcse.lam": [0.1, 0.4]}
    spec["tune"]["equal_budget"] = False
    spec["tune"]["grid"]["none"] = {"loss.temperature": [0.05, 0.1, 0.2]}
    cells = tuning_cells(parse_spec(spec), tmp_path / "out")
    assert len(cells) == (3 + 2) * 2 and not (tmp_path / "out").exists()
    by = {(c.strategy, c.point_index, c.seed): c for c in cells}
    assert by[("none", 2, 8)].config["loss"]["temperature"] == 0.2
    entries = by[("mixcse", 1, 7)].config["loss"]["strategies"]
    assert [(e["name"], e["lam"]) for e in entries] == [("mixcse", 0.4)]
    assert by[("mixcse", 1, 7)].run_dir == tmp_path / "out" / "tune" / "text" / "mixcse" / "point1" / "seed7"


# -------------------------------------------------------------------- extending a finished comparison
def _files(root):
    """Every file under root: its bytes and its modification time."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def _steps_in(summary_cells):
    return sum(read_results(c)["total_steps"] for c in summary_cells)


def test_a_finished_comparison_takes_more_seeds_and_strategies(text_spec, tmp_path, capsys):
    out = tmp_path / "cmp"
    path = _write(tmp_path, text_spec)
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert f"each cell's output is in {out / 'logs'}/" in err
    assert "4/4" in err  # one bar in training steps: the cell's 4
    first = out / "runs" / "text" / "none" / "seed1"
    # A finished cell keeps its record only: no resume checkpoint, no exported model.
    assert sorted(p.name for p in first.iterdir()) == ["config.yaml", "metrics.jsonl", "results.json"]
    before = _files(out / "runs")

    # More seeds and a new strategy: only the three new cells train; the finished one is untouched.
    spec = copy.deepcopy(text_spec)
    spec["seeds"] = [1, 2]
    spec["strategies"]["mixcse"] = [{"name": "mixcse", "lam": 0.2}]
    path = _write(tmp_path, spec)
    assert cli(["compare", str(path), "--output", str(out), "--resume", "--jobs", "2", "--threads", "2",
                "--keep", "checkpoints,models"]) == 0
    err = capsys.readouterr().err
    assert "16/16" in err  # every cell's steps, the finished one's included
    assert {p: v for p, v in _files(out / "runs").items() if p in before} == before
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == ["text-mixcse-seed1.log", "text-mixcse-seed2.log", "text-none-seed1.log",
                    "text-none-seed2.log"]
    assert (out / "logs" / "text-none-seed1.log").read_text().count("$ ") == 1  # never run again
    kept = out / "runs" / "text" / "mixcse" / "seed2"
    assert (kept / "checkpoint.pt").is_file() and (kept / "best").is_dir()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 4 and summary["tasks"]["text"]["paired"]["mixcse"]["n"] == 2
    assert yaml.safe_load((out / "spec.yaml").read_text())["seeds"] == [1, 2]

    # Anything else changed is refused, naming it, and nothing runs.
    for change, named in [
        (lambda s: s["strategies"]["mixcse"][0].update(lam=0.3), "strategies.mixcse"),
        (lambda s: s.update(seeds=[2]), "seeds (seed 1 removed)"),
        (lambda s: s["tasks"]["text"].update(set={"train.lr": 0.1}), "tasks.text.set"),
        (lambda s: s["tasks"]["text"].update(strategy_args={"mixcse": {"lam": 0.3}}),
         "tasks.text.strategy_args"),
    ]:
        changed = copy.deepcopy(spec)
        change(changed)
        assert cli(["compare", str(_write(tmp_path, changed, "changed.yaml")), "--output", str(out),
                    "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"the spec differs from the comparison's ({out / 'spec.yaml'}) in {named};" in err, err
    assert {p: v for p, v in _files(out / "runs").items() if p in before} == before

    # A corrupt record is said to be corrupt, left out of a report, and run again with --resume.
    corrupt = out / "runs" / "text" / "none" / "seed2" / "results.json"
    record = json.loads(corrupt.read_text())
    corrupt.write_text(json.dumps({**record, "final_scores": {"stsb_dev": "high"}}))
    assert cli(["compare", str(path), "--output", str(out), "--report-only"]) == 0
    captured = capsys.readouterr()
    assert "text/none/seed2: corrupt results.json" in captured.err and "Traceback" not in captured.err
    assert "missing (1): text/none/seed2" in captured.out
    assert cli(["compare", str(path), "--output", str(out), "--resume", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "final_scores is {'stsb_dev': 'high'}, not a mapping of numbers" in err
    assert (out / "runs" / "text" / "none" / "seed2.corrupt" / "results.json").is_file()  # nothing deleted
    assert read_results(corrupt.parent)["finished"]
    assert {p: v for p, v in _files(out / "runs").items() if p in before} == before


def test_a_comparison_folder_in_use_is_refused(text_spec, tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        path = _write(tmp_path, text_spec)
        assert cli(["compare", str(path), "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"process {holder.pid}" in err and "in progress" in err
        assert not (out / "runs").exists()
    finally:
        holder.kill()
        holder.wait()
    assert cli(["compare", str(path), "--output", str(out), "--keep", "weights"]) == 2
    assert "--keep: 'weights' is not one of checkpoints, models" in capsys.readouterr().err


def test_equal_tuning_picks_each_strategy_s_best_point_on_the_selection_score(text_spec, tmp_path, capsys):
    spec = copy.deepcopy(text_spec)
    spec["strategies"]["mixcse"] = [{"name": "mixcse", "lam": 0.2}]
    del spec["strategies"]["mixcse"]  # one strategy: a mixing argument's point is checked above
    spec["tune"] = {"seeds": [7], "grid": {"none": {"loss.temperature": [0.05, 0.5]}}}
    out = tmp_path / "cmp"
    path = _write(tmp_path, spec)
    assert cli(["compare", str(path), "--output", str(out), "--print-commands"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and "tuning cells" in captured.err
    assert cli(["compare", str(path), "--output", str(out), "--jobs", "2", "--threads", "2"]) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    tuning = summary["tuning"]["text"]
    for strategy, key in (("none", "loss.temperature"),):
        scores = {}
        for i, value in enumerate(spec["tune"]["grid"][strategy][key]):
            record = read_results(out / "tune" / "text" / strategy / f"point{i}" / "seed7")
            scores[value] = record["final_scores"]["stsb_dev"]
            assert tuning[strategy]["grid"][i]["seeds"] == {"7": scores[value]}
        best = max(scores, key=scores.get)
        row = tuning[strategy]
        assert row["best"] == {key: best} and row["score"] == "stsb_dev"
        assert row["runs"] == 2 and row["steps_per_run"] == 4
        config = yaml.safe_load((out / "runs" / "text" / strategy / "seed1" / "config.yaml").read_text())
        assert config["loss"]["temperature"] == best
    # Done: nothing is left to print or to run.
    assert cli(["compare", str(path), "--output", str(out), "--print-commands"]) == 0
    assert capsys.readouterr().out.strip() == ""


def test_the_shipped_specs_do_not_compare_a_selection_score():
    from hardmix.compare.spec import load_spec

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    for path in sorted((root / "configs" / "compare").glob("*.yaml")):
        for task in load_spec(path).tasks.values():
            assert not task.allow_selection_score, (path, task.name)
    assert os.path.isdir(root / "configs" / "compare")


def test_the_specs_that_continue_cpu_full_only_add_strategies():
    """strategies.yaml and variants.yaml say they resume a copy of a finished cpu_full comparison: each
    differs from cpu_full.yaml only by added strategies (what ``--resume`` accepts), and adds some."""
    from hardmix.compare.resume import spec_differences
    from hardmix.config.loader import load_yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "configs" / "compare"
    base = load_yaml(root / "cpu_full.yaml")
    for name in ("strategies.yaml", "variants.yaml"):
        spec = load_yaml(root / name)
        assert spec_differences(base, spec) == [], name
        assert set(spec["strategies"]) > set(base["strategies"]), name
    moved = {**load_yaml(root / "variants.yaml"), "seeds": [1, 2, 3]}
    assert spec_differences(base, moved) == ["seeds (seed 4 removed)"]


def test_strategy_set_gives_arms_that_differ_in_a_setting(text_spec, tmp_path):
    """``strategy_set``: config overrides of one strategy's cells in every task (two arms that differ in
    train.precision, say), validated like the task's ``set``; a strategy it does not name, or a key the
    comparison sets itself, is refused naming it."""
    spec = copy.deepcopy(text_spec)
    spec["strategies"] = {"fp32": [{"name": "none"}], "bf16": [{"name": "none"}]}
    spec["baseline"] = "fp32"
    spec["strategy_set"] = {"fp32": {"train.precision": "fp32"}, "bf16": {"train.precision": "bf16"}}
    cells = build_grid(parse_spec(spec), tmp_path / "out")
    assert {c.strategy: c.config["train"]["precision"] for c in cells} == {"fp32": "fp32", "bf16": "bf16"}
    for bad, message in (({"mochi": {"train.lr": 1.0}}, r"^strategy_set\.mochi: not one of the strategies"),
                         ({"bf16": {"train.seed": 3}}, r"^strategy_set\.bf16\.train\.seed: not a key a "
                          r"comparison can set \(the comparison gives each cell its seed"),
                         ({"bf16": {"lr": 3}}, r"^strategy_set\.bf16\.lr: expected a dotted config key"),
                         ({"bf16": {"train.precision": "fp8"}}, "train.precision")):
        with pytest.raises(ConfigError, match=message):
            build_grid(parse_spec({**spec, "strategy_set": bad}), tmp_path / "out")


def test_the_committed_comparisons_keep_the_precision_they_were_recorded_in():
    """``train.precision``'s default is ``auto`` (bf16 where the CPU computes it): the specs of the committed
    comparisons set fp32, which every one of their cells recorded, so ``--resume`` adds cells alike; each
    shipped spec is its comparison's, or one that ``--resume`` continues it with."""
    from hardmix.compare.resume import spec_differences
    from hardmix.compare.spec import load_spec

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    for name in ("cpu_full", "strategies", "premise", "variants"):
        for task in load_spec(root / "configs/compare" / f"{name}.yaml").tasks.values():
            assert "train.precision=fp32" in task.overrides, (name, task.name)
    # cpu_full's and strategies' records (retired, kept as recorded) are of the earlier one-pass vision recipe
    # (32 px, K 4096): their specs now give MoCHi and SynCo counts for the recipe's K 256, and differ from
    # the records there only
    recipe_change = {"cpu_full": ["tasks.vision.strategy_args"], "strategies": ["tasks.vision.strategy_args"]}
    records = {"cpu_full": "superseded/compare_cpu_full", "strategies": "superseded/compare_strategies",
               "premise": "compare_premise"}
    for name, record in records.items():
        folder = root / "results" / record
        assert spec_differences(yaml.safe_load((folder / "spec.yaml").read_text()), yaml.safe_load(
            (root / "configs/compare" / f"{name}.yaml").read_text())) == recipe_change.get(name, []), name
        configs = list(folder.glob("**/config.yaml"))
        assert configs and {yaml.safe_load(c.read_text())["train"]["precision"] for c in configs} == {"fp32"}


def test_a_task_may_have_its_own_seeds(text_spec, tmp_path):
    """``tasks.<t>.seeds``: cheap tasks can have more seeds than costly ones; the cells, the tuning-seed
    check and ``--resume``'s check (added seeds only) follow each task's own list."""
    from hardmix.compare.resume import spec_differences

    spec = copy.deepcopy(text_spec)
    spec["tasks"]["more"] = {**spec["tasks"]["text"], "task": "text", "seeds": [1, 2, 3]}
    parsed = parse_spec(spec)
    assert parsed.tasks["text"].seeds == [1] and parsed.tasks["more"].seeds == [1, 2, 3]
    cells = build_grid(parsed, tmp_path / "out", check_data=False)
    assert sorted((c.task.name, c.seed) for c in cells) == [("more", 1), ("more", 2), ("more", 3),
                                                           ("text", 1)]
    for bad, message in (([3, 3], r"tasks\.more\.seeds: \[3, 3\] repeats a seed"),
                         ([], r"tasks\.more\.seeds: expected a list of non-negative integers")):
        with pytest.raises(ConfigError, match=message):
            parse_spec({**spec, "tasks": {**spec["tasks"], "more": {**spec["tasks"]["more"], "seeds": bad}}})
    tuned = {**spec, "tune": {"seeds": [3], "grid": {"none": {"loss.temperature": [0.05]}}}}
    with pytest.raises(ConfigError, match="tune.seeds: 3 is also an evaluation seed"):
        parse_spec(tuned)
    fewer = copy.deepcopy(spec)
    fewer["tasks"]["more"]["seeds"] = [1, 2]
    assert spec_differences(spec, fewer) == ["tasks.more.seeds (seed 3 removed)"]
    assert spec_differences(text_spec, spec) == ["tasks.more (added)"]
    own = copy.deepcopy(text_spec)
    own["tasks"]["text"]["seeds"] = [1, 4]  # the spec's [1] and one added
    assert spec_differences(text_spec, own) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4))
def test_a_name_that_passes_stays_a_folder_inside_the_output(names):
    """Property: a spec's task or strategy name either is refused or, as a path part, resolves to a folder
    directly inside the output (never a path, ``..``, absolute, or a second name for another's folder)."""
    from pathlib import Path

    from hardmix.compare.spec import check_names

    out = Path("/tmp/hardmix-out").resolve()
    try:
        check_names(names, "tasks")
    except ConfigError as e:
        assert str(e).startswith("tasks: ") and "\n" not in str(e)
        return
    folders = {(out / n).resolve() for n in names}
    assert all(f.parent == out for f in folders)
    assert len({f.name.casefold().replace("-", "_") for f in folders}) == len(names)


def test_a_task_named_as_a_path_is_refused_before_anything_is_written(text_spec, tmp_path, capsys):
    """A task named ``../../x`` or ``/abs/dir`` wrote its cells outside
    ``--output`` and its cleanup deleted what was there. It is refused, naming it, and nothing is written."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("the user's")
    for name in ("../../victim", str(victim), "a/b", ".."):
        spec = copy.deepcopy(text_spec)
        spec["tasks"] = {name: {**spec["tasks"]["text"], "task": "text"}}
        out = tmp_path / "deep" / "cmp"
        assert cli(["compare", str(_write(tmp_path, spec)), "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"tasks: {name!r} is not a plain name" in err and "Traceback" not in err
        assert not (tmp_path / "deep").exists()
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("where", ["set", "set, nested", "strategy_set", "tune"])
@pytest.mark.parametrize("key", ["train.stop_after_steps", "output", "train.seed", "loss.strategies",
                                 "loss.strategies[0].lam"])
def test_keys_a_comparison_cannot_set_are_refused_at_validation(text_spec, key, where):
    """A key that stops a cell early or moves its folder is refused, naming where it was given, before
    anything runs; so is one the comparison sets itself for every cell (its seed, its strategies), which
    was accepted in a task's ``set`` and silently overridden."""
    spec = copy.deepcopy(text_spec)
    value = {"train.stop_after_steps": 2, "output": "/tmp/elsewhere", "train.seed": 5,
             "loss.strategies": "mixcse", "loss.strategies[0].lam": 0.3}[key]
    if where == "set":
        spec["tasks"]["text"]["set"] = {key: value}
        named = f"tasks.text.set.{key}"
    elif where == "set, nested":  # {train: {seed: 5}} is train.seed too (it went past the check)
        nested = value
        for part in reversed(key.split(".")):
            nested = {part: nested}
        spec["tasks"]["text"]["set"] = nested
        named = f"tasks.text.set.{key}"
    elif where == "strategy_set":
        spec["strategy_set"] = {"none": {key: value}}
        named = f"strategy_set.none.{key}"
    else:
        spec["tune"] = {"seeds": [101], "grid": {"none": {key: [value]}}}
        named = f"tune.grid.none.{key}"
    with pytest.raises(ConfigError, match=rf"^{re.escape(named)}: not a key a comparison can set"):
        parse_spec(spec)


def test_every_strategy_s_config_passes_the_task_s_own_checks_before_any_cell(tmp_path, tiny_vision_config,
                                                                               capsys):
    """A MoCHi n_hard that passes validation (<= the queue) but not the task's own check
    (each query's own keys masked) failed in the middle of a comparison; it is refused before the first
    cell, naming the task and the strategy, and nothing is written."""
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(tiny_vision_config(
        data={"max_samples": 64}, loss={"queue_size": 64, "mask_same_sample": True})))
    spec = {
        "seeds": [1], "baseline": "none",
        "strategies": {"none": [{"name": "none"}], "mochi": [{"name": "mochi"}]},
        "tasks": {"vision": {"config": str(tmp_path / "vision.yaml"), "score": "val_knn_top1",
                             "allow_selection_score": True, "set": {"eval.at_end": True,
                                                                     "data.val_samples": 32},
                             "strategy_args": {"mochi": {"n_hard": 63, "n_pair": 8, "n_query": 4}}}},
    }
    out = tmp_path / "cmp"
    assert cli(["compare", str(_write(tmp_path, spec)), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    # refused when the config is validated (the queue less the own keys of data.max_samples images)
    assert "tasks.vision with strategy mochi: " in err, err
    assert "loss.strategies[0].n_hard: 63 negatives needed" in err, err
    assert not out.exists()


def test_a_finished_cell_s_cleanup_deletes_only_what_hardmix_wrote(text_spec, tmp_path):
    """Cleanup deleted "everything that is not a record" of a cell's folder. It deletes
    the checkpoint and the task's exports by name (text: ``best/``), nothing else, whatever --keep says."""
    from hardmix.compare.runner import discard_unkept

    (cell,) = build_grid(parse_spec(text_spec), tmp_path / "out", check_data=False)
    cell.run_dir.mkdir(parents=True)
    for name in ("config.yaml", "metrics.jsonl", "results.json", "checkpoint.pt", "notes.txt"):
        (cell.run_dir / name).write_text(name)
    for folder in ("best", "mine"):
        (cell.run_dir / folder).mkdir()
        (cell.run_dir / folder / "f").write_text("x")
    discard_unkept(cell, {"checkpoints"})
    assert sorted(p.name for p in cell.run_dir.iterdir()) == [
        "checkpoint.pt", "config.yaml", "metrics.jsonl", "mine", "notes.txt", "results.json"]
    discard_unkept(cell, set())
    assert sorted(p.name for p in cell.run_dir.iterdir()) == [
        "config.yaml", "metrics.jsonl", "mine", "notes.txt", "results.json"]
    assert (cell.run_dir / "mine" / "f").read_text() == "x"


def test_a_diverging_tuning_point_is_a_recorded_result_and_the_comparison_finishes(text_spec, tmp_path,
                                                                                   capsys):
    """Fault injection: with ``train.lr: [3e-5, 1e8]`` every --resume failed the same
    cell and fixing the grid was refused, so the comparison could never finish. The failed point is now a
    result: recorded with its reason, tuning chooses among the other points, the evaluation runs, --resume
    does not retry it, and --retry-failed does."""
    spec = copy.deepcopy(text_spec)
    spec["tune"] = {"seeds": [101], "grid": {"none": {"train.lr": [3.0e-5, 1.0e+8]}}}
    path, out = _write(tmp_path, spec), tmp_path / "cmp"
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1"]) == 1  # a cell failed now
    captured = capsys.readouterr()
    failed = out / "tune" / "text" / "none" / "point1" / "seed101" / "failure.json"
    reason = json.loads(failed.read_text())["reason"]
    assert reason and "tune/text/none/point1/seed101 failed" in captured.err
    assert read_results(out / "runs" / "text" / "none" / "seed1")["finished"]  # evaluated at the good point
    summary = json.loads((out / "summary.json").read_text())
    grid = summary["tuning"]["text"]["none"]["grid"]
    assert summary["tuning"]["text"]["none"]["best"] == {"train.lr": 3.0e-5}
    assert grid[1]["mean"] is None and grid[1]["failed"] == {"101": reason}
    assert "| train.lr=100000000.0 | failed | n/a |" in (out / "summary.md").read_text()
    log = out / "logs" / "tune-text-none-point1-seed101.log"
    runs = log.read_text().count("$ ")
    assert cli(["compare", str(path), "--output", str(out), "--resume", "--threads", "1"]) == 0
    assert log.read_text().count("$ ") == runs  # a recorded failure is not retried
    assert cli(["compare", str(path), "--output", str(out), "--resume", "--retry-failed",
                "--threads", "1"]) == 1
    assert log.read_text().count("$ ") == runs + 1 and failed.is_file()


def test_killing_the_comparison_leaves_no_training_process_behind(text_spec, tmp_path):
    """SIGKILL of ``hardmix compare`` (which cannot pass anything on) left its cells'
    training processes running; they get SIGTERM from the kernel when it dies, checkpoint and stop."""
    import signal
    import time

    spec = copy.deepcopy(text_spec)
    spec["tasks"]["text"]["set"] = {"train.epochs": 10000, "train.max_steps": 100000, "train.save_steps": 0}
    path, out = _write(tmp_path, spec), tmp_path / "cmp"
    proc = subprocess.Popen([sys.executable, "-m", "hardmix", "compare", str(path), "--output", str(out),
                             "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def trainers() -> list[str]:
        ps = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        return [line for line in ps.splitlines() if " train " in line and str(out) in line]

    t0 = time.time()
    while not (out / "runs" / "text" / "none" / "seed1" / "metrics.jsonl").is_file():
        assert time.time() - t0 < 180 and proc.poll() is None, "the cell never started"
        time.sleep(0.5)
    assert trainers()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t0 = time.time()
    while trainers():
        assert time.time() - t0 < 30, trainers()
        time.sleep(0.5)


def test_an_evaluation_key_edited_between_resumes_is_refused_naming_it(text_spec, tmp_path, capsys):
    """An ``eval.*`` key edited in a task's config file between two --resumes (seeds
    added) pooled cells scored under two protocols in one t-test, without a word. A cell's recorded config
    must equal the spec's in every key but where and how it ran, so the resume is refused, naming it."""
    path, out = _write(tmp_path, text_spec), tmp_path / "cmp"
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1"]) == 0
    config = yaml.safe_load((tmp_path / "text.yaml").read_text())
    config["eval"]["max_length"] = 16
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(config))
    more = _write(tmp_path, {**text_spec, "seeds": [1, 2]}, "more.yaml")
    capsys.readouterr()
    assert cli(["compare", str(more), "--output", str(out), "--resume", "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "text/none/seed1: " in err and "was trained with another config (eval.max_length differ)" in err
    assert not (out / "runs" / "text" / "none" / "seed2").exists()


def test_cells_made_from_other_data_are_never_tested_together(text_spec, tmp_path, capsys):
    """Each result records a fingerprint of its config, data, inputs and version; a
    report over cells whose fingerprints disagree (the corpus changed between two resumes, say) refuses,
    naming the cells and what differs, instead of pooling them in one paired test."""
    spec = {**text_spec, "seeds": [1, 2]}
    path, out = _write(tmp_path, spec), tmp_path / "cmp"
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1", "--jobs", "2"]) == 0
    one, two = (read_results(out / "runs" / "text" / "none" / f"seed{k}") for k in (1, 2))
    assert one["fingerprint"] == two["fingerprint"]  # the seed aside, the two cells were made alike
    damaged = {**two, "fingerprint": {**two["fingerprint"], "data": {"corpus sha256": "0" * 64}}}
    (out / "runs" / "text" / "none" / "seed2" / "results.json").write_text(json.dumps(damaged))
    capsys.readouterr()
    assert cli(["compare", str(path), "--output", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "text/none/seed2 and text/none/seed1 were made from different data" in err, err


def test_values_added_to_a_tuning_grid_run_only_the_new_points_and_choose_again(text_spec, tmp_path, capsys):
    """``--resume`` with values added to a knob of ``tune.grid``: the old points keep their folders (a new
    value put first in the list does not renumber them), only the new points train, the best point is
    chosen again, and an evaluation cell run at a point no longer chosen is moved to ``superseded/``
    (byte for byte), run again at the new choice, and listed in the summary."""
    spec = copy.deepcopy(text_spec)
    spec["tune"] = {"seeds": [7], "grid": {"none": {"loss.temperature": [0.5]}}}
    out = tmp_path / "cmp"
    assert cli(["compare", str(_write(tmp_path, spec)), "--output", str(out), "--threads", "1"]) == 0
    capsys.readouterr()
    first_tune = _files(out / "tune" / "text")
    first_eval = _files(out / "runs")
    assert json.loads((out / "tune" / "points.json").read_text()) == {
        "text": {"none": [{"loss.temperature": 0.5}]}}

    grown = copy.deepcopy(spec)
    grown["tune"]["grid"]["none"]["loss.temperature"] = [0.05, 0.5]  # the new value first
    path = _write(tmp_path, grown)
    assert cli(["compare", str(path), "--output", str(out), "--print-commands"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and "loss.temperature=0.05" in printed[0] and "point1" in printed[0]
    assert cli(["compare", str(path), "--output", str(out), "--resume", "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert {p: v for p, v in _files(out / "tune" / "text").items() if p in first_tune} == first_tune  # kept
    scores = {t: read_results(out / "tune" / "text" / "none" / f"point{i}" / "seed7")["final_scores"]
              ["stsb_dev"] for i, t in ((0, 0.5), (1, 0.05))}
    best = max(scores, key=scores.get)  # a tie: the point tuned first (0.5, point0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tuning"]["text"]["none"]["best"] == {"loss.temperature": best}
    assert [g["point"]["loss.temperature"] for g in summary["tuning"]["text"]["none"]["grid"]] == [0.05, 0.5]
    config = yaml.safe_load((out / "runs" / "text" / "none" / "seed1" / "config.yaml").read_text())
    assert config["loss"]["temperature"] == best
    old = out / "superseded" / "text" / "none" / "point0" / "seed1"
    if best == 0.5:  # the choice stands: the evaluation cell is untouched
        assert _files(out / "runs") == first_eval and not old.exists() and "superseded" not in summary
    else:
        cell = out / "runs" / "text" / "none" / "seed1"
        moved = {old / p.relative_to(cell): v for p, v in first_eval.items()}
        assert {p: v for p, v in _files(out / "superseded").items() if p in moved} == moved
        assert (old / "cell.log").is_file() and "superseded/" in captured.err
        old_score = read_results(old)["final_scores"]["stsb_dev"]
        assert summary["superseded"] == [{"cell": "text/none/seed1", "point": {"loss.temperature": 0.5},
                                          "score": old_score, "why": "a tuning point no longer chosen"}]
    # A value removed, or a knob added, is refused.
    for axes in ({"loss.temperature": [0.05]}, {"loss.temperature": [0.05, 0.5], "train.lr": [1e-5]}):
        changed = copy.deepcopy(grown)
        changed["tune"]["grid"]["none"] = axes
        path = _write(tmp_path, changed, "c.yaml")
        assert cli(["compare", str(path), "--output", str(out), "--resume"]) == 2
        assert "in tune.grid;" in capsys.readouterr().err


def test_auto_precision_is_one_for_every_cell_of_a_task(text_spec, tmp_path, monkeypatch):
    """``train.precision: auto`` resolves once per task of a comparison: on a CPU with native bf16, a task
    comparing only strategies whose bf16 was shown (text: ``none``) runs every cell, tuning cells too, in
    bf16; one that adds MixCSE runs every cell, ``none``'s included, in fp32: a difference never measures
    the precision."""
    import hardmix.training.runtime as runtime

    monkeypatch.setattr(runtime, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    config = yaml.safe_load(open(text_spec["tasks"]["text"]["config"]))
    config["train"]["precision"] = "auto"
    (tmp_path / "auto.yaml").write_text(yaml.safe_dump(config))
    spec = copy.deepcopy(text_spec)
    spec["tasks"]["text"]["config"] = str(tmp_path / "auto.yaml")
    spec["tune"] = {"seeds": [7], "grid": {"none": {"loss.temperature": [0.05]}}}
    for strategies, expected in (({"none": [{"name": "none"}]}, "bf16"),
                                 ({"none": [{"name": "none"}], "mixcse": [{"name": "mixcse"}]}, "fp32")):
        spec["strategies"] = strategies
        spec["tune"]["grid"] = {s: {"loss.temperature": [0.05]} for s in strategies}
        parsed = parse_spec(spec)
        cells = build_grid(parsed, tmp_path / "out", check_data=False) + tuning_cells(
            parsed, tmp_path / "out", check_data=False)
        assert len(cells) == 2 * len(strategies)
        assert {c.config["train"]["precision"] for c in cells} == {expected}, strategies


# ------------------------------------------------------------------ the resolved cell, not the spec's text
def test_a_key_a_cell_cannot_carry_in_the_task_s_config_file_is_refused_before_any_cell(text_spec, tmp_path,
                                                                                          capsys):
    """``train.stop_after_steps`` in a task's config file (not its ``set``) reached every cell: each
    stopped short, was resumed and stopped again, and the comparison could never finish. The keys a cell may
    not carry are checked on each cell's final config, at validation (``--print-commands`` too), in one line
    naming the spec, the task, the strategy, the key and the config file."""
    config = yaml.safe_load((tmp_path / "text.yaml").read_text())
    config["train"]["stop_after_steps"] = 2
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(config))
    path = _write(tmp_path, text_spec)
    for extra in (["--print-commands"], []):
        assert cli(["compare", str(path), "--output", str(tmp_path / "out"), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        for part in (str(path), "tasks.text with strategy none", "train.stop_after_steps: 2",
                     f"in the task's config file {tmp_path / 'text.yaml'}", "not a key a comparison can set"):
            assert part in err, (part, err)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["strategy_args", "strategy_args by its label", "tune grid"])
def test_an_entry_cannot_change_which_strategy_a_label_names(text_spec, tmp_path, where, capsys):
    """``strategy_args: {none: {name: mixcse}}`` or a grid key ``none.name`` changed the strategy of the
    cells labelled ``none``: they trained MixCSE, reported (and paired) as the baseline. Refused at
    validation, naming the key; the final config's strategies are checked against the label's as well."""
    spec = copy.deepcopy(text_spec)
    spec["strategies"]["mixcse"] = [{"name": "mixcse"}]
    spec["strategies"]["alias"] = [{"name": "none"}]
    if where == "strategy_args":
        spec["tasks"]["text"]["strategy_args"] = {"none": {"name": "mixcse"}}
        named = r"tasks\.text\.strategy_args\.none\.name"
    elif where == "strategy_args by its label":
        spec["tasks"]["text"]["strategy_args"] = {"alias": {"name": "mixcse"}}
        named = r"tasks\.text\.strategy_args\.alias\.name"
    else:
        grid = {"none": {"none.name": ["mixcse"]}, "mixcse": {}, "alias": {}}
        spec["tune"] = {"seeds": [101], "grid": grid, "equal_budget": False}
        named = r"tune\.grid\.none\.none\.name"
    with pytest.raises(ConfigError, match=rf"^{named}: an entry's arguments cannot change which strategy"):
        parse_spec(spec)
    assert cli(["compare", str(_write(tmp_path, spec)), "--output", str(tmp_path / "out"),
                "--print-commands"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_the_final_config_of_every_cell_is_checked_whatever_made_it(text_spec, tmp_path):
    """The check is on the cell's final config, not on what the parser saw: a spec changed after parsing (a
    strategy's arguments that rename it, a tuning point that sets a key a cell cannot carry) is refused by
    :func:`build_grid` and :func:`tuning_cells` alike, naming the cell."""
    spec = parse_spec(text_spec)
    spec.tasks["text"].strategy_args = {"none": {"name": "mixcse"}}
    with pytest.raises(ConfigError, match=r"^tasks\.text with strategy none: loss\.strategies: mixcse, not "
                                          r"the strategies its label names \(none\)"):
        build_grid(spec, tmp_path / "out")
    spec = parse_spec({**text_spec, "tune": {"seeds": [101], "grid": {"none": {"train.lr": [1e-3]}}}})
    spec.tune.grid["none"] = {"train.stop_after_steps": [1]}
    with pytest.raises(ConfigError, match=r"^tasks\.text with strategy none at tune point .*: "
                                          r"train\.stop_after_steps: 1 given by tune\.grid\.none "
                                          r"\(train\.stop_after_steps=1\): not a key a comparison can set"):
        tuning_cells(spec, tmp_path / "out", check_data=False)


def test_a_killed_comparison_s_temporary_files_are_removed_by_the_next_one_which_says_so(text_spec, tmp_path,
                                                                                       capsys):
    """A comparison killed while it wrote its summary or a plot left a hidden temporary file (of the dead
    writer's pid) in its folder; the next command in that folder removes it and says so."""
    import subprocess
    import sys

    path, out = _write(tmp_path, text_spec), tmp_path / "cmp"
    assert cli(["compare", str(path), "--output", str(out), "--threads", "1"]) == 0
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a process that has ended: the killed writer
    left = [out / f".summary.md.{proc.pid}-abcd1234.tmp",
            out / "plots" / f".forest.png.{proc.pid}-abcd1234.tmp"]
    for f in left:
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(b"\0" * 1000)
    capsys.readouterr()
    assert cli(["compare", str(path), "--output", str(out), "--report-only"]) == 0
    err = capsys.readouterr().err
    assert not any(f.exists() for f in left)
    assert f"removed 1 temporary file a killed run left in {out} (0.0 MB): {left[0].name}" in err
    assert f"removed 1 temporary file a killed run left in {out / 'plots'} (0.0 MB): {left[1].name}" in err
