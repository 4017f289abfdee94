"""``hardmix compare``: the spec's validation, the paired statistics against SciPy, a real grid of tiny
text and vision runs (killed mid-way and resumed), printed commands that run as printed, the report."""

from __future__ import annotations

import base64
import copy
import io
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from scipy import stats

from hardmix.cli import main as cli
from hardmix.compare.cell_process import cell_env, interpreter_command
from hardmix.compare.grid import build_grid
from hardmix.compare.spec import load_spec, parse_spec
from hardmix.compare.stats import paired_difference
from hardmix.strategies import MixCSE
from hardmix.training import read_results
from hardmix.utils.errors import ConfigError
from hardmix.utils.provenance import package_root


# ------------------------------------------------------------------------------------------ stats
def test_paired_difference_equals_scipy_on_known_numbers():
    x = [52.1, 52.6, 51.9, 53.0, 52.4]
    y = [50.5, 51.0, 50.7, 51.9, 51.2]
    d = paired_difference(x, y)
    diffs = np.subtract(x, y)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=diffs.mean(), scale=stats.sem(diffs))
    assert d.mean == pytest.approx(diffs.mean(), abs=1e-12) and d.n == 5
    assert (d.ci_low, d.ci_high) == (pytest.approx(lo, abs=1e-10), pytest.approx(hi, abs=1e-10))
    assert d.p_value == pytest.approx(stats.ttest_rel(x, y).pvalue, rel=1e-10)
    assert d.verdict == "better"
    worse = paired_difference(y, x)
    assert worse.verdict == "worse" and worse.p_value == pytest.approx(d.p_value)
    noisy = paired_difference([50.0, 52.0, 49.0], [51.0, 50.5, 50.0])
    assert noisy.verdict == "n.s." and noisy.ci_low < 0 < noisy.ci_high
    assert paired_difference([1.0], [0.0]).verdict == "too few seeds"
    assert math.isnan(paired_difference([1.0], [0.0]).p_value)


# ------------------------------------------------------------------------------------------- spec
@pytest.fixture
def grid_spec(tmp_path, tiny_text_config, tiny_vision_config):
    """A spec of tiny real runs: 2 tasks x 2 strategies x 2 seeds."""
    text = copy.deepcopy(tiny_text_config)
    text["train"].update(max_steps=4, save_steps=2)
    text["eval"].update(at_end=True)
    vision = tiny_vision_config(data={"val_samples": 20}, train={"epochs": 1, "save_steps": 3},
                                eval={"at_end": True, "linear_epochs": 5})
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    (tmp_path / "vision.yaml").write_text(yaml.safe_dump(vision))
    return {
        "seeds": [1, 2],
        "baseline": "none",
        "strategies": {"none": [{"name": "none"}], "mixcse": [{"name": "mixcse", "lam": 0.2}]},
        "tasks": {
            # The tiny text runs score only what selects the model: allowed here, and said so.
            "text": {
                "config": str(tmp_path / "text.yaml"),
                "score": "stsb_dev",
                "allow_selection_score": True,
            },
            "vision": {
                "config": str(tmp_path / "vision.yaml"),
                "score": "knn_top1",
                "set": {"train.lr": 0.2},
            },
        },
    }


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(colour=1), "unknown key colour"),
        (lambda s: s.update(seeds=[1, 1]), "seeds: .* repeats"),
        (lambda s: s.update(baseline="simcse"), "baseline: 'simcse' is not one of the strategies"),
        (lambda s: s["strategies"].update(bad=[{"name": "mixup"}]), r"strategies\.bad\[0\]\.name"),
        (lambda s: s["strategies"].update(bad=[{"name": "mixcse", "lam": 2}]), r"strategies\[0\]\.lam"),
        (lambda s: s["tasks"]["text"].update(set={"train.max_stepz": 3}), r"tasks\.text .*train\.max_stepz"),
        (lambda s: s["tasks"]["text"].update(score="sts_avgg"), r"tasks\.text\.score: .sts_avgg. is not"),
        (lambda s: s["tasks"]["text"].update(config="nowhere.yaml"), r"tasks\.text\.config: .*nowhere\.yaml"),
        (lambda s: s["tasks"]["vision"].update(task="audio"), r"tasks\.vision\.task: unknown task 'audio'"),
        (
            lambda s: s["tasks"]["text"].update(set={"data.train_file": "/nowhere/corpus.txt"}),
            r"tasks\.text with strategy none: .*/nowhere/corpus\.txt",
        ),
        (
            lambda s: s["tasks"]["vision"].update(set={"data.dataset": "/nowhere/images"}),
            r"tasks\.vision with strategy none: data\.dataset: .*/nowhere/images",
        ),
        (
            lambda s: s["tasks"]["vision"].update(strategy_args={"mochi": {"n_hard": 8}}),
            r"strategy_args\.mochi: neither a strategy of the spec nor used by one",
        ),
    ],
)
def test_the_spec_is_validated_completely_before_any_run(grid_spec, tmp_path, change, message):
    spec = copy.deepcopy(grid_spec)
    change(spec)
    with pytest.raises(ConfigError, match=message):
        build_grid(parse_spec(spec), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_strategy_args_are_the_tasks_own(grid_spec, tmp_path):
    spec = copy.deepcopy(grid_spec)
    spec["tasks"]["vision"]["strategy_args"] = {"mixcse": {"lam": 0.3}}
    cells = build_grid(parse_spec(spec), tmp_path / "out")
    lams = {(c.task.name, c.strategy): c.config["loss"]["strategies"] for c in cells}
    assert lams[("text", "mixcse")] == [MixCSE(lam=0.2).config()]
    assert lams[("vision", "mixcse")] == [MixCSE(lam=0.3).config()]
    assert {c.config["train"]["seed"] for c in cells} == {1, 2} and len(cells) == 8


def test_arguments_under_a_spec_strategy_s_name_reach_that_list_only(grid_spec, tmp_path):
    spec = copy.deepcopy(grid_spec)
    spec["strategies"]["mixcse_ramp"] = [{"name": "mixcse", "lam": {"start": 0.1, "end": 0.3}}]
    spec["tasks"]["vision"]["strategy_args"] = {"mixcse": {"stop_grad": False},
                                               "mixcse_ramp": {"lam": {"start": 0.1, "end": 0.3, "steps": 9}}}
    spec["tasks"]["text"]["strategies"] = ["none", "mixcse"]
    cells = build_grid(parse_spec(spec), tmp_path / "out")
    lists = {(c.task.name, c.strategy): c.config["loss"]["strategies"] for c in cells}
    assert lists[("vision", "mixcse")] == [MixCSE(stop_grad=False).config()]
    ramp = {"start": 0.1, "end": 0.3, "steps": 9, "shape": "linear"}
    assert lists[("vision", "mixcse_ramp")] == [{**MixCSE(lam=0.3, stop_grad=False).config(), "lam": ramp}]
    assert len(cells) == 2 * (2 + 3)
    # text gives no schedule length: the spec is refused before any run, naming the task and strategy
    del spec["tasks"]["text"]["strategies"]
    with pytest.raises(ConfigError, match=r"tasks\.text with strategy mixcse_ramp: .*lam: a ramp needs"):
        build_grid(parse_spec(spec), tmp_path / "out3")


def test_a_task_runs_only_the_strategies_it_names(grid_spec, tmp_path):
    spec = copy.deepcopy(grid_spec)
    spec["strategies"]["mochi"] = [{"name": "mochi", "n_hard": 4, "n_pair": 4, "n_query": 2}]
    spec["tasks"]["vision"]["strategies"] = ["none", "mixcse"]
    cells = build_grid(parse_spec(spec), tmp_path / "out")
    per_task = {t: sorted({c.strategy for c in cells if c.task.name == t}) for t in ("text", "vision")}
    assert per_task == {"text": ["mixcse", "mochi", "none"], "vision": ["mixcse", "none"]}
    assert len(cells) == 2 * (3 + 2)


def test_tasks_selects_the_spec_s_tasks(grid_spec, tmp_path, capsys):
    from hardmix.cli import main as cli
    from hardmix.compare.spec import select_tasks

    spec = select_tasks(parse_spec(grid_spec), "vision")
    assert {c.task.name for c in build_grid(spec, tmp_path / "out")} == {"vision"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(grid_spec))
    assert cli(["compare", str(path), "--tasks", "audio", "--print-commands"]) == 2
    assert "--tasks: 'audio' is not a task of the spec (tasks: text, vision)" in capsys.readouterr().err
    assert cli(["compare", str(path), "--tasks", "text", "--print-commands"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 4 and all(" train text " in line for line in printed)


def test_the_shipped_specs_are_valid(tmp_path, data_root):
    for path in sorted((Path(__file__).resolve().parents[2] / "configs" / "compare").glob("*.yaml")):
        # The papers' spec needs BERT-base and ImageNet, not here: its cells are validated, not its data.
        cells = build_grid(load_spec(path), tmp_path / path.stem, check_data="papers" not in path.name)
        assert {c.task.name for c in cells} == set(load_spec(path).tasks), path
        named = {n: t.strategies for n, t in load_spec(path).tasks.items() if t.strategies}
        for name, only in named.items():  # a task's own list of strategies is what runs
            assert {c.strategy for c in cells if c.task.name == name} == set(only), path
        if path.name == "quickstart.yaml":
            spec = load_spec(path)
            assert set(spec.strategies) == {"none", "mixcse", "mochi"} and len(spec.seeds) >= 2


# ------------------------------------------------------------------------------------ a real grid
class _Report(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables, self.images = 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        if tag == "img":
            self.images.append(dict(attrs)["src"])


def _finished(out: Path) -> list[Path]:
    return [p.parent for p in (out / "runs").rglob("results.json") if read_results(p.parent)["finished"]]


def test_a_grid_killed_mid_way_finishes_only_what_is_missing(grid_spec, tmp_path, capsys):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(grid_spec))
    out = tmp_path / "cmp"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hardmix",
            "compare",
            str(spec_path),
            "--output",
            str(out),
            "--jobs",
            "2",
            "--threads",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    t0 = time.time()
    while len(_finished(out)) < 2 if (out / "runs").is_dir() else True:
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() - t0 < 300
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "--resume" in err, err
    done_before = {p: (p / "results.json").stat().st_mtime_ns for p in _finished(out)}
    assert 2 <= len(done_before) < 8
    # Without --resume an existing comparison is refused; with it only the missing cells run.
    assert cli(["compare", str(spec_path), "--output", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert cli(["compare", str(spec_path), "--output", str(out), "--resume", "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "mixcse" in printed and "report:" in printed
    assert len(_finished(out)) == 8
    assert all((p / "results.json").stat().st_mtime_ns == t for p, t in done_before.items())
    # A rerun trains nothing.
    t = time.time()
    assert cli(["compare", str(spec_path), "--output", str(out), "--resume"]) == 0
    assert time.time() - t < 60
    summary = json.loads((out / "summary.json").read_text())
    for task, score in (("text", "stsb_dev"), ("vision", "knn_top1")):
        t = summary["tasks"][task]
        assert t["score"] == score and t["strategies"]["mixcse"]["n"] == 2
        seeds = t["strategies"]["mixcse"]["seeds"]
        base = t["strategies"]["none"]["seeds"]
        diffs = [seeds[s] - base[s] for s in ("1", "2")]  # JSON keys are strings after the round trip
        assert t["paired"]["mixcse"]["mean"] == pytest.approx(np.mean(diffs))
        for seed in (1, 2):
            record = read_results(out / "runs" / task / "mixcse" / f"seed{seed}")
            assert seeds[str(seed)] == record["final_scores"][score]
    # The report renders: every table and image is there and every image decodes.
    parser = _Report()
    parser.feed((out / "report.html").read_text())
    assert parser.tables >= 3 and len(parser.images) >= 4
    for src in parser.images:
        assert src.startswith("data:image/png;base64,")
        Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).verify()
    assert (out / "summary.md").read_text().count("|") > 20 and (out / "summary.csv").is_file()
    assert {p.name for p in (out / "plots").iterdir()} >= {
        "forest.png",
        "scores.png",
        "selection_curves.png",
        "dynamics.png",
        "alignment_uniformity.png",
    }


def test_printed_commands_run_as_printed(grid_spec, tmp_path, capsys):
    spec = copy.deepcopy(grid_spec)
    del spec["tasks"]["vision"]
    spec["seeds"] = [3]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "cmp"
    assert cli(["compare", str(path), "--output", str(out), "--print-commands"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("hardmix train text ") for line in lines)
    for line in lines:
        args = shlex.split(line)
        done = subprocess.run([sys.executable, "-m", "hardmix", *args[1:]], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert cli(["compare", str(path), "--output", str(out), "--print-commands"]) == 0
    assert capsys.readouterr().out.strip() == ""  # nothing left to run
    assert cli(["compare", str(path), "--output", str(out), "--report-only"]) == 0
    assert "missing" not in capsys.readouterr().out


def test_the_strategies_beyond_the_papers_run_from_a_comparison(grid_spec, tmp_path, capsys):
    """An exclusion, an estimator and the control, each one cell of a real (tiny) vision comparison."""
    spec = copy.deepcopy(grid_spec)
    del spec["tasks"]["text"]
    spec["seeds"] = [1]
    spec["strategies"] = {
        "none": [{"name": "none"}],
        "hcl_filtered": [{"name": "false_negative_filter", "top_k": 2}, {"name": "hcl"}],
        "hard_copies": [{"name": "hard_copies", "n_hard": 8, "n_pair": 8, "n_query": 4}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cli(["compare", str(path), "--output", str(tmp_path / "cmp"), "--threads", "1"]) == 0
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["finished"] == summary["cells"] == 3
    rows = summary["tasks"]["vision"]["strategies"]
    assert all(rows[s]["n"] == 1 and 0.0 <= rows[s]["mean"] <= 100.0 for s in spec["strategies"])
    metrics = (tmp_path / "cmp" / "runs" / "vision" / "hcl_filtered" / "seed1" / "metrics.jsonl").read_text()
    assert "false_negative_filter/excluded_fraction" in metrics and "hcl/clamped" in metrics


@pytest.mark.parametrize("n", [1, 10, 11, 20, 21, 40])
def test_every_strategy_of_a_spec_gets_its_own_colour(n):
    from hardmix.compare.plots import colours

    names = [f"s{i}" for i in range(n)]
    first, again = colours(names), colours(names)
    assert list(first) == names and first == again  # the spec's order, the same in every plot
    assert len({tuple(c) for c in first.values()}) == n  # no two strategies share a colour


def test_cells_import_the_installed_hardmix_when_run_from_a_clone(tmp_path):
    # A clone's working folder holds its own hardmix/ (here one that cannot import); `python -m hardmix`
    # run there would import it instead of the installed hardmix, and every cell would fail.
    clone = tmp_path / "clone"
    (clone / "hardmix").mkdir(parents=True)
    (clone / "hardmix" / "__init__.py").write_text("raise ImportError('the clone is not installed')\n")
    plain = subprocess.run([sys.executable, "-m", "hardmix", "strategies"], cwd=clone, capture_output=True,
                           text=True)
    assert plain.returncode != 0 and "the clone is not installed" in plain.stderr  # what a cell met before
    done = subprocess.run(interpreter_command(["hardmix", "strategies"]), cwd=clone, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "mixcse" in done.stdout and "mochi" in done.stdout


def test_cells_run_the_comparisons_own_hardmix_from_a_clone_that_is_not_installed(tmp_path):
    # `python -m hardmix compare` run in a clone that is not installed imports the clone (its working
    # folder); its cells, started with -P, would import another hardmix (the installed one) or none at all.
    # cell_env puts the parent's package folder first on their PYTHONPATH.
    clone = tmp_path / "clone"
    shutil.copytree(package_root() / "hardmix", clone / "hardmix",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import subprocess, sys; from hardmix.compare.cell_process import cell_env; "
             "child = [sys.executable, '-P', '-c', 'import hardmix; print(hardmix.__file__)']; "
             "print(subprocess.run(child, env=cell_env(1), capture_output=True, text=True, "
             "check=True).stdout)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=clone, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == clone / "hardmix" / "__init__.py"
    # a hardmix installed in site-packages leaves PYTHONPATH alone
    site_dir = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert cell_env(1, base={"PYTHONPATH": "/opt/x"}, root=site_dir)["PYTHONPATH"] == "/opt/x"
    assert cell_env(3, base={})["OMP_NUM_THREADS"] == "3"


def test_measure_start_trains_nothing_and_goes_alone(grid_spec, tmp_path, capsys):
    """``--measure-start`` measures and reports a comparison's finished cells: refused with ``--resume``,
    ``--print-commands`` or ``--status`` (which would run or list cells), in one line, before anything."""
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(grid_spec))
    for extra in ("--resume", "--print-commands", "--status"):
        out = str(tmp_path / "out")
        assert cli(["compare", str(tmp_path / "spec.yaml"), "--output", out, "--measure-start", extra]) == 2
        err = capsys.readouterr().err
        assert "--measure-start: measures the start of a comparison's finished cells" in err, extra
    assert not (tmp_path / "out").exists()
