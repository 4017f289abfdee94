"""The text search's record says what its runs measured: ``table.md`` and ``table.json`` are the benchmark
script's output of the committed runs, each row's dev scores and losses are recomputed here from the run's
own ``metrics.jsonl`` and ``results.json``, and the held-out intervals and the README's conclusion from the
held-out runs' scores with SciPy's t distribution (not the project's statistics)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results/text_search_2026-12-06"


def _script():
    spec = importlib.util.spec_from_file_location("text_search", ROOT / "benchmarks/text_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runs() -> list[Path]:
    return sorted(p.parent for p in FOLDER.glob("runs/*/results.json"))


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_the_table_is_the_script_s_output_of_the_records():
    script = _script()
    rows, regimes = script.rows_of(FOLDER), script.held_out(FOLDER)
    assert (FOLDER / "table.md").read_text() == script.markdown(rows, regimes)
    assert json.loads((FOLDER / "table.json").read_text()) == json.loads(
        json.dumps({"runs": rows, "held_out": regimes}))
    assert (FOLDER / "curves.png").stat().st_size > 10_000


def test_every_row_recomputes_from_its_run():
    script = _script()
    table = {r["name"]: r for r in json.loads((FOLDER / "table.json").read_text())["runs"]}
    assert sorted(table) == [p.name for p in _runs()]
    for run in _runs():
        row, lines = table[run.name], _lines(run)
        res = json.loads((run / "results.json").read_text())
        config = yaml.safe_load((run / "config.yaml").read_text())
        dev = [(x["step"], x["stsb_dev"]) for x in lines if "stsb_dev" in x]
        best = max(dev, key=lambda x: x[1])
        assert (row["best_step"], row["dev_best"]) == best and row["dev_end"] == dev[-1][1]
        assert dev[-1][0] == res["steps"] == row["trained_steps"]
        assert config["train"]["max_steps"] == row["steps"]
        assert res["steps"] == (config["train"]["stop_after_steps"] or config["train"]["max_steps"])
        loss = [x["loss"] for x in lines if "loss" in x]
        assert (row["loss_first"], row["loss_last"]) == (loss[0], loss[-1])
        assert row["dev_start"] == res["start_scores"]["stsb_dev"]
        assert (row["pooling"], row["lr"], row["seed"]) == (config["model"]["pooling"], config["train"]["lr"],
                                                           config["train"]["seed"])
        assert config["loss"]["strategies"] == [{"name": "none"}]
        # The command the run records is the script's for that name, so the script reruns it.
        command = (run / "command.txt").read_text()
        assert command == f"python {' '.join(script.command(run.name, Path('RUN') / run.name)[1:])}\n"
        assert "--set train.threads=1" in command
    # The start does not depend on the seed or the settings of training: one value per pooling.
    for pooling in {r["pooling"] for r in table.values()}:
        starts = {r["dev_start"] for r in table.values() if r["pooling"] == pooling and r["max_length"] == 32}
        assert len(starts) == 1, (pooling, starts)


def _interval(ends: list[float], start: float) -> tuple[float, float, float]:
    d = [e - start for e in ends]
    n, mean = len(d), sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _sts_avg(name: str) -> float:
    return json.loads((FOLDER / "heldout" / f"{name}.json").read_text())["sts"]["avg"]


def test_the_held_out_intervals_and_the_conclusion():
    regimes = json.loads((FOLDER / "table.json").read_text())["held_out"]
    assert regimes
    readme = " ".join((FOLDER / "README.md").read_text().split())
    for name, e in regimes.items():
        ends = [_sts_avg(run) for run in e["runs"]]
        assert ends == e["sts_avg"] and len(ends) >= 2
        res = [json.loads((FOLDER / "runs" / run / "results.json").read_text()) for run in e["runs"]]
        assert len({r["seed"] for r in res}) == len(res)
        pooling = {r["task_info"]["eval_pooling"] for r in res}
        own = _sts_avg({"avg": "start_avg", "cls_before_pooler": "start_cls"}[pooling.pop()])
        for key, base in (("vs_start", own), ("vs_start_mean_pooled", _sts_avg("start_avg"))):
            mean, low, high = _interval(ends, base)
            assert e[key]["mean"] == pytest.approx(mean, abs=1e-9)
            assert e[key]["ci"] == pytest.approx([low, high], abs=1e-9)
            assert f"{mean:+.2f} [{low:.2f}, {high:.2f}]" in readme, (name, key)
    # The verdict in words: a regime beats its start with both poolings only if, for each pooling, both
    # intervals lie above 0.
    lows = {name: min(e["vs_start"]["ci"][0], e["vs_start_mean_pooled"]["ci"][0])
            for name, e in regimes.items()}
    found = any(low > 0 for name, low in lows.items() if name.startswith("avg")) and any(
        low > 0 for name, low in lows.items() if name.startswith("cls"))
    assert ("No regime" in readme) != found
    # "by under a tenth of a point with mean pooling"; [CLS] "not" (its interval against the free encoder
    # holds 0).
    assert max(e["vs_start_mean_pooled"]["mean"] for n, e in regimes.items() if n.startswith("avg")) < 0.1
    assert "by under a tenth of a point with mean pooling" in readme
    (cls,) = (e for n, e in regimes.items() if n.startswith("cls"))
    assert cls["vs_start_mean_pooled"]["ci"][0] < 0 < cls["vs_start_mean_pooled"]["ci"][1]


def test_the_prose_recomputes_from_the_runs():
    rows = json.loads((FOLDER / "table.json").read_text())["runs"]
    readme = " ".join((FOLDER / "README.md").read_text().split())
    avg = [r for r in rows if r["pooling"] == "avg"]
    cls = [r for r in rows if r["pooling"] == "cls"]
    (dev_avg,), (dev_cls,) = {r["dev_start"] for r in avg}, {r["dev_start"] for r in cls}
    assert {r["dev_start_mean_pooled"] for r in cls} == {dev_avg}
    assert (f"The starting encoder scores {dev_avg:.2f} on STS-B dev mean-pooled and {dev_cls:.2f} with its "
            f"bare [CLS]; on the held-out average, {_sts_avg('start_avg'):.2f} mean-pooled and "
            f"{_sts_avg('start_cls'):.2f} with [CLS]") in readme
    best = max(avg, key=lambda r: r["dev_best"] if r["seed"] == 1 else 0.0)
    assert (f"The best STS-B dev of any mean-pooled search run (seed 1) is {best['dev_best']:.2f}, "
            f"{best['dev_best'] - dev_avg:+.2f} over the start, with batch {best['batch']} (step "
            f"{best['best_step']})") in readme
    first = {r["name"]: r["loss_first"] for r in rows}
    assert (f"the loss of the first 10 steps is {first['avg_lr3e-6']:.2f} against ln 64 = {math.log(64):.2f} "
            f"for chance (dropout 0.3: {first['avg_lr3e-6_dropout0.3']:.2f})") in readme
    best_cls = max(r["dev_best"] for r in cls)
    assert best_cls < dev_avg and f"from {dev_cls:.2f} to {best_cls:.2f} at lr 1e-5" in readme
    # The committed comparison's ten [CLS] seeds against the mean-pooled start, as the README quotes them.
    ends = [json.loads(p.read_text())["final_scores"]["sts_avg"]
            for p in sorted((ROOT / "results/compare_peak_fair/runs/text/none").glob("seed*/results.json"))]
    mean, low, high = _interval(ends, _sts_avg("start_avg"))
    assert len(ends) == 10 and f"{mean:+.2f} [{low:.2f}, {high:.2f}] over its 10 seeds" in readme


def test_the_readme_and_results_say_what_the_search_found():
    """README.md's first screen and docs/results.md quote the search's held-out intervals as its record
    computes them, and say plainly that no strategy improves on the free mean-pooled encoder."""
    regimes = json.loads((FOLDER / "table.json").read_text())["held_out"]

    def quoted(name: str) -> str:
        e = regimes[name]["vs_start_mean_pooled"]
        return f"{e['mean']:+.2f} [{e['ci'][0]:.2f}, {e['ci'][1]:.2f}]"

    for doc in ("README.md", "docs/results.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert f"[CLS] SimCSE {'at ' if doc == 'README.md' else 'scored '}{quoted('cls_lr1e-5')}" in text, doc
        assert (f"+{quoted('avg_lr3e-6_batch128')[1:]} (selected on dev; {quoted('avg_lr3e-6')} at batch 64)"
                in text), doc
        assert "an encoder that is not improving" in text and "results/text_search_2026-12-06/" in text, doc
    # "selected on dev": batch 128's regime is the mean-pooled run with the best STS-B dev at seed 1
    rows = [r for r in json.loads((FOLDER / "table.json").read_text())["runs"]
            if r["pooling"] == "avg" and r["seed"] == 1]
    assert max(rows, key=lambda r: r["dev_best"])["batch"] == 128
    readme_head = (ROOT / "README.md").read_text().split("## Install")[0]
    assert "no strategy measurably improves on the free encoder" in " ".join(readme_head.split())
