"""A comparison that says when it cannot answer: the exact test's floor from the spec alone (printed at
validation, refused with ``--strict``), the cells that selected an edge step, the tuning's grid edges and
inert knobs, and the simultaneous (Bonferroni) interval, each against an independent computation on
constructed inputs."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from scipy import stats

from hardmix.cli import main as cli
from hardmix.compare import plots
from hardmix.compare.floors import exact_floors
from hardmix.compare.report import diagnostics_note, verdicts_markdown
from hardmix.compare.spec import parse_spec
from hardmix.compare.stats import exact_floor, holm_adjusted, paired_difference
from hardmix.compare.summary import boundary, evaluations, flags, paired_table
from hardmix.compare.summary_types import (
    Boundary,
    CellRecord,
    CodeTable,
    ComparisonSummary,
    GridScore,
    StrategyRow,
    TuningRow,
)
from hardmix.compare.tables import edge_mark, verdict_table
from hardmix.compare.tuning import _chosen, grid_edge, inert_knobs
from hardmix.utils.errors import ConfigError
from tests.compare.markdown_tables import parse_tables


# ------------------------------------------------------------------------------ the exact test's floor
def _needed(m: int) -> int:
    """The fewest seeds whose m x 2 / 2^n is below 0.05, by counting up."""
    return next(n for n in range(1, 64) if m * 2 / 2**n < 0.05)


@pytest.mark.parametrize("m, n", [(1, 5), (1, 6), (2, 5), (4, 10), (7, 10), (5, 5), (3, 2), (40, 4)])
def test_the_exact_floor_is_m_times_2_over_2_to_the_n(m, n):
    floor, needed = exact_floor(m, n)
    assert floor == min(1.0, m * 2 / 2**n) and needed == _needed(m)
    assert exact_floor(m, needed)[0] < 0.05 <= exact_floor(m, needed - 1)[0]


def test_the_committed_specs_floors():
    root = Path(__file__).resolve().parents[2] / "configs/compare"
    from hardmix.compare.spec import load_spec

    got = {name: {t: (f["comparisons"], f["seeds"], f["seeds_needed"])
                  for t, f in exact_floors(load_spec(root / f"{name}.yaml")).items()}
           for name in ("cpu_full", "strategies", "premise", "precision")}
    assert got == {"cpu_full": {"text": (4, 10, 8), "vision": (2, 5, 7)},
                   "strategies": {"text": (7, 10, 9), "vision": (5, 5, 8)},
                   "premise": {"text": (2, 10, 7), "vision": (2, 10, 7)},
                   "precision": {"text": (1, 5, 6), "vision": (1, 5, 6)}}


def _spec(config: Path) -> dict:
    """Two tasks of one config: ``text`` with 7 seeds (2 comparisons: 2 x 2/2^7 < 0.05) and ``few`` with
    2 (1.0: no exact verdict)."""
    task = {"task": "text", "config": str(config), "score": "stsb_dev", "allow_selection_score": True}
    return {
        "seeds": [1, 2, 3, 4, 5, 6, 7],
        "baseline": "none",
        "strategies": {"none": [{"name": "none"}], "mixcse": [{"name": "mixcse", "lam": 0.2}],
                       "mixcse_high": [{"name": "mixcse", "lam": 0.4}]},
        "tasks": {"text": task, "few": {**task, "seeds": [1, 2]}},
    }


def test_exact_floors_come_from_the_spec_alone(tmp_path):
    (tmp_path / "c.yaml").write_text("{}")
    spec = _spec(tmp_path / "c.yaml")
    spec["tasks"]["few"]["strategies"] = ["none", "mixcse"]  # a family of 1 in this task
    floors = exact_floors(parse_spec(spec))
    assert floors == {"text": {"comparisons": 2, "seeds": 7, "floor": 2 * 2 / 2**7, "seeds_needed": 7},
                      "few": {"comparisons": 1, "seeds": 2, "floor": 0.5, "seeds_needed": 6}}
    spec["tasks"]["few"]["strategies"] = ["none"]  # only the baseline: nothing to test, no line
    assert "few" not in exact_floors(parse_spec(spec))


@pytest.fixture
def floor_spec(tmp_path, tiny_text_config) -> Path:
    text = copy.deepcopy(tiny_text_config)
    text["eval"].update(at_end=True)
    (tmp_path / "text.yaml").write_text(yaml.safe_dump(text))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path / "text.yaml"), sort_keys=False))
    return path


def test_print_commands_prints_each_task_s_floor_and_strict_refuses(floor_spec, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli(["compare", str(floor_spec), "--output", str(out), "--print-commands"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3 * 7 + 3 * 2  # the commands, on stdout
    assert captured.err.splitlines() == [
        "hardmix: exact test, tasks.text: 2 comparisons x 7 seeds: smallest p_exact_holm 2 x 2/2^7 = "
        "0.0312 < 0.05; an exact verdict needs >= 7 seeds",
        "hardmix: warning: exact test, tasks.few: 2 comparisons x 2 seeds: smallest p_exact_holm 2 x 2/2^2 "
        "= 1 >= 0.05; an exact verdict needs >= 7 seeds",
        "hardmix: each cell also measures its starting encoder before its first step (eval.start: all; the "
        "control of every strategy's 'learned' verdict; eval.start: selection keeps it cheap, none skips it)",
    ]
    # --strict: one line naming the task and its numbers, before anything is validated, run or written
    assert cli(["compare", str(floor_spec), "--output", str(out), "--print-commands", "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("hardmix: error: --strict: tasks.few: 2 comparisons x 2 seeds: ")
    assert "2 x 2/2^2 = 1 >= 0.05; an exact verdict needs >= 7 seeds" in line
    # without the task that cannot reach a verdict, --strict lets the spec through
    spec = yaml.safe_load(floor_spec.read_text())
    del spec["tasks"]["few"]
    floor_spec.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert cli(["compare", str(floor_spec), "--output", str(out), "--print-commands", "--strict"]) == 0
    assert "warning" not in capsys.readouterr().err


# --------------------------------------------------------------------------- cells at an edge step
def _cell(tmp_path: Path, name: str, steps: list[int]) -> SimpleNamespace:
    """A fake cell folder whose metrics.jsonl logs training every 5 steps and evaluates at ``steps``."""
    run = tmp_path / name
    run.mkdir()
    lines = [{"step": s, "loss": 1.0 / s} for s in range(5, max(steps) + 1, 5)]
    lines += [{"step": s, "stsb_dev": 50.0 + s / 100, "best_stsb_dev": 0.0} for s in steps]
    lines.sort(key=lambda r: r["step"])
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return SimpleNamespace(run_dir=run)


@pytest.mark.parametrize("best, first, last", [(20, 1, 0), (100, 0, 1), (60, 0, 0), (5, 1, 0)])
def test_boundary_counts_a_cell_that_selected_its_first_or_last_evaluation(tmp_path, best, first, last):
    cell = _cell(tmp_path, "seed1", [20, 40, 60, 80, 100])
    record = _record(best, evaluations(cell, "stsb_dev"))
    assert [e["step"] for e in record.evaluations] == [20, 40, 60, 80, 100]
    assert boundary([record]) == Boundary(at_first=first, at_last=last, cells=1)


def _record(best: int, evaluations: list[dict]) -> CellRecord:
    return CellRecord("text", "none", 1, {}, best, 1.0, "stsb_dev", evaluations)


def test_boundary_counts_a_single_evaluation_in_both_and_skips_cells_without_one(tmp_path):
    once = _record(625, evaluations(_cell(tmp_path, "once", [625]), "stsb_dev"))
    many = _record(40, evaluations(_cell(tmp_path, "many", [20, 40, 60]), "stsb_dev"))
    none = _record(10, [])  # no metrics.jsonl evaluation: not judged
    assert boundary([once, many, none]) == Boundary(at_first=1, at_last=1, cells=2)
    assert boundary([]) == Boundary(at_first=0, at_last=0, cells=0)


# ------------------------------------------------------------------------------- the tuning's grid
AXES = {"mixcse.lam": [0.1, 0.2, 0.4], "loss.temperature": [0.1, 0.05], "train.lr": [3e-5],
        "data.source": ["a", "b", "c"]}


@pytest.mark.parametrize("lam, temperature, expected", [
    (0.1, 0.1, {"mixcse.lam": "low", "loss.temperature": "high of 2"}),
    (0.4, 0.05, {"mixcse.lam": "high", "loss.temperature": "low of 2"}),
    (0.2, 0.05, {"loss.temperature": "low of 2"}),  # lam interior: absent; a 2-value knob: always an edge
])
def test_grid_edge_names_the_knobs_the_chosen_point_took_at_an_end(lam, temperature, expected):
    best = {"mixcse.lam": lam, "loss.temperature": temperature, "train.lr": 3e-5, "data.source": "c"}
    assert grid_edge(AXES, best) == expected  # one value (lr) and names (source): no edge to speak of
    assert grid_edge(AXES, None) is None


def _grid(means: dict[float, float], spread: float) -> list[GridScore]:
    """Points of one knob ``k``, each scored on 2 tuning seeds at ``mean -+ spread``."""
    return [GridScore({"k": v}, {1: m - spread, 2: m + spread}, m, {}) for v, m in means.items()]


def test_inert_knob_compares_the_knob_s_spread_with_the_standard_error():
    # seeds 50 -+ 0.5: each point's sd is sqrt(0.5), its mean's standard error sqrt(0.5) / sqrt(2) = 0.5
    se = np.std([-0.5, 0.5], ddof=1) / math.sqrt(2)
    inert = inert_knobs({"k": [1, 2, 3]}, _grid({1: 50.0, 2: 50.3, 3: 50.1}, 0.5), None)
    assert inert["score_se"] == pytest.approx(se) and inert["score_se_from"] == "tuning seeds"
    assert inert["knob_spread"] == {"k": pytest.approx(0.3)} and inert["inert_knob"] == ["k"]
    live = inert_knobs({"k": [1, 2, 3]}, _grid({1: 50.0, 2: 51.0, 3: 50.1}, 0.5), None)
    assert live["knob_spread"] == {"k": pytest.approx(1.0)} and live["inert_knob"] == []
    # the records' own sampling error of the selection score, where larger, is the threshold
    sampled = inert_knobs({"k": [1, 2, 3]}, _grid({1: 50.0, 2: 51.0, 3: 50.1}, 0.5), 1.2, "stsb_dev_se")
    assert (sampled["score_se"], sampled["score_se_from"]) == (1.2, "stsb_dev_se")
    assert sampled["inert_knob"] == ["k"]
    # one tuning seed and no sampling error: no standard error, nothing judged
    one = [GridScore({"k": v}, {1: m}, m, {}) for v, m in ((1, 50.0), (2, 50.01))]
    assert inert_knobs({"k": [1, 2]}, one, None)["inert_knob"] is None


def test_inert_knob_averages_over_the_other_knobs_and_skips_failed_points():
    axes = {"a": [1, 2], "b": [10, 20]}
    means = {(1, 10): 50.0, (1, 20): 52.0, (2, 10): 50.1, (2, 20): 52.1}
    grid = [GridScore({"a": a, "b": b}, {1: m - 0.2, 2: m + 0.2}, m, {}) for (a, b), m in means.items()]
    grid.append(GridScore({"a": 3, "b": 10}, {}, None, {1: "failed"}))  # failed: not counted
    r = inert_knobs({**axes, "a": [1, 2, 3]}, grid, None)
    assert r["knob_spread"] == {"a": pytest.approx(0.1), "b": pytest.approx(2.0)}
    assert r["inert_knob"] == ["a"]  # 0.1 < 0.2 (sd 0.283 / sqrt(2)) < 2.0


# ------------------------------------------------------------------------- the simultaneous interval
def test_the_simultaneous_interval_is_bonferroni_s_over_the_tested_family():
    rng = np.random.default_rng(3)
    base = rng.normal(50, 1, 6)
    runs = {f"s{i}": base + rng.normal(shift, 0.6, 6) for i, shift in enumerate([0.2, 1.0, -1.5])}
    family = {k: paired_difference(list(x), list(base)) for k, x in runs.items()}
    family["one seed"] = paired_difference([1.0], [0.0])  # untested: not in the family, no interval
    adjusted = holm_adjusted(family)
    m = 3
    for k, x in runs.items():
        d = x - base
        half = stats.t.ppf(1 - 0.05 / (2 * m), d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
        lo, hi = adjusted[k].ci_simultaneous
        assert lo == pytest.approx(d.mean() - half, rel=1e-10)
        assert hi == pytest.approx(d.mean() + half, rel=1e-10)
        assert lo < adjusted[k].ci_low < adjusted[k].ci_high < hi  # wider than the 95% interval
        assert adjusted[k].ci_simultaneous_method == "Bonferroni, 3 comparisons"
    assert all(math.isnan(v) for v in adjusted["one seed"].ci_simultaneous)
    assert adjusted["one seed"].ci_simultaneous_method is None
    # a family of one: the 95% interval
    alone = paired_difference(list(runs["s1"]), list(base))
    assert alone.ci_simultaneous == (alone.ci_low, alone.ci_high)


def _rows(scores: dict[str, dict[int, float]], first: int = 0, last: int = 0) -> dict[str, StrategyRow]:
    """Each strategy's row from its scores by seed, its cells ``first`` at their first evaluated step and
    ``last`` at their last."""
    return {s: StrategyRow.from_json({
        "mean": float(np.mean(list(v.values()))), "std": float(np.std(list(v.values()), ddof=1)), "n": len(v),
        "seeds": v, "nan_seeds": [], "wall_seconds_mean": 1.0, "wall_seconds_total": 5.0, "sampling_se": None,
        "secondary": {}, "diagnostics": {"boundary": {"at_first": first, "at_last": last, "cells": len(v)},
                                         "flags": []}}) for s, v in scores.items()}


def _summary(diffs: dict[str, np.ndarray], first: int = 0, last: int = 0) -> ComparisonSummary:
    """A summary of one task, ``t``, whose strategies differ from the baseline ``none`` by ``diffs`` (5
    seeds); each strategy's 5 cells with ``first`` at their first evaluated step and ``last`` at their
    last; read back from its JSON, as ``summary.json`` holds it."""
    seeds = [1, 2, 3, 4, 5]
    scores = {"none": dict.fromkeys(seeds, 50.0)}
    scores |= {s: {k: 50.0 + float(v) for k, v in zip(seeds, d)} for s, d in diffs.items()}
    per = _rows(scores, first, last)
    paired = {s: p.as_json() for s, p in paired_table(per, "none", seeds).items()}
    data = {"baseline": "none", "seeds": seeds, "missing": [], "failed": {}, "finished": 15, "cells": 15,
            "tasks": {"t": {"task": "text", "score": "sts_avg", "seeds": seeds, "paired": paired,
                            "strategies": {s: r.as_json() for s, r in per.items()},
                            "selection_metric": "stsb_dev"}}}
    return ComparisonSummary.from_json(json.loads(json.dumps(data)))


def _bounded(summary: ComparisonSummary, **bounds: tuple[int, int]) -> ComparisonSummary:
    """``summary`` with these strategies' cells ``(first, last)`` at their first and last steps."""
    data = summary.as_json()
    for s, (first, last) in bounds.items():
        data["tasks"]["t"]["strategies"][s]["diagnostics"]["boundary"].update(at_first=first, at_last=last)
    return ComparisonSummary.from_json(data)


def _at_p(p: float, spread: np.ndarray) -> np.ndarray:
    """Differences ``spread`` shifted so that their one-sample t-test's two-sided p is ``p``."""
    sd, n = spread.std(ddof=1), spread.size
    return spread - spread.mean() + stats.t.ppf(1 - p / 2, n - 1) * sd / math.sqrt(n)


def test_filled_points_follow_the_simultaneous_interval_and_verdicts_stay_holm_s(monkeypatch, tmp_path):
    """p 0.01 and 0.04 in a family of 2: Holm finds both (0.02, 0.04), Bonferroni's interval only the
    first (0.04 > 0.05 / 2): the second's verdict is ``better`` beside an open point."""
    spread = np.array([-1.0, 0.0, 1.0, -0.5, 0.5])
    summary = _summary({"a": _at_p(0.01, spread), "b": _at_p(0.04, spread)})
    paired = summary.tasks["t"].paired
    assert [paired[s].verdict for s in "ab"] == ["better", "better"]
    assert paired["a"].ci_simultaneous[0] > 0 > paired["b"].ci_simultaneous[0]
    assert paired["b"].ci_simultaneous_method == "Bonferroni, 2 comparisons"
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, dpi=110: figures.append(fig) or path)
    plots.plot_forest(summary, tmp_path / "forest.png", tmp_path)
    (ax,) = figures[0].axes
    names = [t.get_text() for t in ax.get_yticklabels()]  # row y's name
    points = [line for line in ax.lines if line.get_marker() == "o"]
    filled = {names[int(p.get_ydata()[0])]: p.get_markerfacecolor() != "white" for p in points}
    assert filled == {"a": True, "b": False}
    widths = sorted({line.get_linewidth() for line in ax.lines if line.get_marker() in ("None", "")})
    assert widths == [1.0, 1.2, 4]  # the zero line, the 95% interval (thin), the simultaneous (thick)
    plots._pyplot().close(figures[0])


def test_a_verdict_resting_on_edge_cells_says_so_beside_it():
    spread = np.array([-1.0, 0.0, 1.0, -0.5, 0.5])
    summary = _summary({"a": _at_p(0.01, spread), "b": _at_p(0.5, spread)}, first=5)
    assert edge_mark(summary, "t", "a") == "(edge: 10/10 at first step)"
    _, rows = verdict_table(summary)
    assert [r[-1] for r in rows] == ["better (t-test only) (edge: 10/10 at first step)",
                                     "n.s. (edge: 10/10 at first step)"]
    markdown = verdicts_markdown(summary)
    tables = parse_tables(markdown)
    task = next(tb for tb in tables if tb["title"] == "t")
    assert [r["verdict"] for r in task["rows"]] == ["", "better (t-test only) (edge: 10/10 at first step)",
                                                    "n.s. (edge: 10/10 at first step)"]
    assert task["head"][4] == "Bonferroni CI (m = 2)"
    assert "A verdict marked (edge: k/N at first or last step)" in markdown  # the legend line
    # the baseline alone at its last step, each cell evaluated once, or no edge at all
    summary = _bounded(summary, none=(0, 2), a=(0, 0))
    assert edge_mark(summary, "t", "a") == "(edge: 2/10 at last step)"
    summary = _bounded(summary, none=(5, 5), a=(5, 5), b=(5, 5))
    assert edge_mark(summary, "t", "a") == "(edge: 10/10 evaluated once)"
    summary = _bounded(summary, none=(0, 0), a=(0, 0), b=(0, 0))
    assert edge_mark(summary, "t", "a") == "" and diagnostics_note(summary) is None
    assert verdict_table(summary)[1][0][-1] == "better (t-test only)"


def test_the_tuning_s_flags_are_mirrored_in_words():
    def tuned(edge: dict | None, inert: list | None) -> TuningRow:
        return TuningRow("stsb_dev", 10, 2, [], {}, False, edge, {}, None, None, inert)

    b = Boundary(at_first=0, at_last=3, cells=5)
    edges = tuned({"mixcse.lam": "high", "loss.temperature": "low of 2"}, ["x.y"])
    assert flags(b, edges) == ["3/5 cells at last step", "grid edge: mixcse.lam high",
                               "grid edge: loss.temperature low of 2", "inert knob: x.y"]
    assert flags(b, tuned(None, None)) == ["3/5 cells at last step"]
    summary = _summary({"a": np.array([1.0, 2.0, 1.5, 1.2, 1.8])})
    summary = replace(summary, tuning={
        "t": {"a": edges, "b": tuned({"z": "low"}, ["x.y"]), "none": tuned({}, [])},
        "u": {"a": tuned({"z": "low"}, None)}})
    note = diagnostics_note(summary)
    assert ("Tuning chose a grid edge (a better point may lie beyond it): t: mixcse.lam high, "
            "loss.temperature low of 2 for a; z low for b. u: z low for a.") in note
    assert note.endswith("within one standard error): t: x.y for a, b.")


# ------------------------------------------------------------------------------ contrasts with a control
def test_contrasts_are_a_family_of_their_own_against_scipy_and_holm():
    """``contrasts: {strategy: control}``: each pair's paired difference over the seeds both scored, its
    p from scipy's paired t-test, Holm over the contrasts only (not over the verdicts against the
    baseline), and the family against the baseline unchanged by them."""
    from hardmix.compare.summary import family_table
    from hardmix.compare.summary_types import TaskSummary
    from hardmix.compare.tables import contrast_table

    rng = np.random.default_rng(3)
    seeds = list(range(1, 11))
    scores = {name: {s: float(v) for s, v in zip(seeds, rng.normal(mu, 0.3, 10), strict=True)}
              for name, mu in (("none", 44.0), ("mixcse", 45.3), ("lam0", 44.9), ("mochi", 44.8),
                               ("copies", 44.75))}
    del scores["copies"][4]  # a seed the control lacks: that contrast pairs 9 seeds
    per = _rows(scores)
    table = family_table(per, {"mixcse - lam0": ("mixcse", "lam0"), "mochi - copies": ("mochi", "copies")},
                         seeds)
    ps = []
    for label, (a, b) in (("mixcse - lam0", ("mixcse", "lam0")), ("mochi - copies", ("mochi", "copies"))):
        common = [s for s in seeds if s in scores[b]]
        x = np.array([scores[a][s] - scores[b][s] for s in common])
        assert table[label].seeds == common and table[label].n == len(common)
        assert table[label].mean == pytest.approx(x.mean())
        ps.append(stats.ttest_1samp(x, 0.0).pvalue)
        assert table[label].p_value == pytest.approx(ps[-1])
    holm = sorted(ps)
    adjusted = [min(1.0, 2 * holm[0]), min(1.0, max(2 * holm[0], holm[1]))]
    for label, p in zip(("mixcse - lam0", "mochi - copies"), ps, strict=True):
        assert table[label].p_holm == pytest.approx(adjusted[holm.index(p)])
    task = TaskSummary("text", "sts_avg", per, seeds, {}, "stsb_dev", False, False, None, {}, {}, table)
    summary = ComparisonSummary("none", seeds, {"text": task}, [], {}, 50, 50, [], CodeTable({}, [], False))
    head, rows = contrast_table(summary, "text")
    assert head[3] == "Bonferroni CI (m = 2)" and [r[0] for r in rows] == ["mixcse - lam0", "mochi - copies"]
    # the baseline's family is what it was: four comparisons, the contrasts not among them
    against = paired_table(per, "none", seeds)
    assert sorted(against) == ["copies", "lam0", "mixcse", "mochi"]
    alone = holm_adjusted({k: paired_difference([scores[k][s] for s in seeds if s in scores[k]],
                                                [scores["none"][s] for s in seeds if s in scores[k]])
                           for k in against})
    expected = {k: v.p_holm for k, v in alone.items()}
    assert {k: v.p_holm for k, v in against.items()} == pytest.approx(expected)


def test_a_contrast_names_two_strategies_other_than_the_baseline():
    from hardmix.utils.errors import ConfigError

    raw = {"seeds": [1], "baseline": "none", "strategies": {"none": [{"name": "none"}],
           "mixcse": [{"name": "mixcse"}], "lam0": [{"name": "mixcse", "lam": 0.02}]},
           "tasks": {"text": {"config": "configs/text/cpu_simcse.yaml"}}}
    assert parse_spec({**raw, "contrasts": {"mixcse": "lam0"}}).contrasts == {"mixcse": "lam0"}
    for bad in ({"mixcse": "none"}, {"mixcse": "mochi"}, {"lam0": "lam0"}):
        with pytest.raises(ConfigError, match=r"contrasts\."):
            parse_spec({**raw, "contrasts": bad})


def test_points_that_tie_exactly_make_an_inert_knob_even_without_a_standard_error():
    """A grid whose points scored alike (one tuning seed, no sampling error) was not judged inert (nothing
    to compare the spread with), and its choice was reported as a grid edge; a spread of exactly 0 is now
    inert whatever the noise, and a knob judged inert is no grid edge."""
    one = [GridScore({"k": v}, {1: 50.0}, 50.0, {}) for v in (1, 2, 3)]
    assert inert_knobs({"k": [1, 2, 3]}, one, None)["inert_knob"] == ["k"]
    flat = [GridScore({"k": v}, {1: 50.0, 2: 50.0}, 50.0, {}) for v in (1, 2)]
    r = inert_knobs({"k": [1, 2]}, flat, None)  # a standard error of 0 (seeds alike): still inert
    assert (r["score_se"], r["inert_knob"]) == (0.0, ["k"])


def test_a_tie_goes_to_the_point_tuned_first_whatever_values_are_added():
    """Ties went to the first point of the grid's order, so adding a smaller value in front switched the
    choice (and reran every evaluation cell); now the point with the lowest folder (the first tuned, which
    keeps its folder when the grid grows) wins a tie, and a better score still wins outright."""
    def cells(order: dict[float, int]) -> list[SimpleNamespace]:
        return [SimpleNamespace(point={"lam": v}, point_index=i) for v, i in order.items()]

    grid = [GridScore({"lam": v}, {}, 50.0, {}) for v in (0.1, 0.2)]
    assert _chosen(grid, cells({0.1: 0, 0.2: 1})) == {"lam": 0.1}
    grown = [GridScore({"lam": 0.05}, {}, 50.0, {}), *grid]  # 0.05 added in front: folder point2
    assert _chosen(grown, cells({0.05: 2, 0.1: 0, 0.2: 1})) == {"lam": 0.1}
    better = [GridScore({"lam": 0.05}, {}, 50.5, {}), *grid]
    assert _chosen(better, cells({0.05: 2, 0.1: 0, 0.2: 1})) == {"lam": 0.05}


@pytest.mark.parametrize("values, shown", [([0.1, 0.2, 0.1], "0.1"), ([1, 1.0], "1.0"), ([True, 1], None)])
def test_a_value_listed_twice_in_a_grid_is_refused(values, shown):
    """``mixcse.lam: [0.1, 0.2, 0.1]`` ran the same point twice under two folders; refused naming the key
    and the value (True and 1 are different config values)."""
    grid = {"none": {}, "mixcse": {"mixcse.lam": values}}
    spec = {"seeds": [1], "strategies": {"none": "none", "mixcse": [{"name": "mixcse"}]},
            "tasks": {"text": {"config": "configs/text/cpu_simcse.yaml"}},
            "tune": {"seeds": [9], "grid": grid, "equal_budget": False}}
    if shown is None:
        parse_spec(spec)
        return
    with pytest.raises(ConfigError, match=rf"^tune\.grid\.mixcse\.mixcse\.lam: the value {shown} is listed "
                                          r"twice"):
        parse_spec(spec)


class _Tuned(SimpleNamespace):
    """A finished tuning cell of one score (the parts of a Cell the tuning table reads)."""

    def status(self) -> str:
        return "finished"

    def record(self) -> dict:
        return {"finished": True, "final_scores": {"stsb_dev": self.score}, "total_steps": 10}

    def failure(self) -> None:
        return None


@pytest.mark.parametrize("lams, folders", [([0.1, 0.2, 0.4], [0, 1, 2]),
                                           ([0.05, 0.1, 0.2, 0.4], [3, 0, 1, 2])])
def test_a_tied_grid_is_inert_not_an_edge_and_growing_it_keeps_the_choice(lams, folders, monkeypatch):
    """Every point of ``mixcse.lam`` scored 50.0 on the one tuning seed: reported as "a grid edge, a better
    point may lie beyond" (lam low) and, grown by 0.05 put first, its choice switched to 0.05 (and the
    evaluation cells ran again). Now the knob is inert, no edge is claimed, and the choice stays 0.1."""
    from hardmix.compare import tuning

    monkeypatch.setattr(tuning, "task_metric", lambda cell: "stsb_dev")
    grid = {"none": {}, "mixcse": {"mixcse.lam": lams}}
    spec = parse_spec({"seeds": [1], "strategies": {"none": "none", "mixcse": [{"name": "mixcse"}]},
                       "tasks": {"text": {"config": "configs/text/cpu_simcse.yaml"}},
                       "tune": {"seeds": [9], "grid": grid, "equal_budget": False}})
    task = spec.tasks["text"]
    cells = [_Tuned(task=task, strategy="none", seed=9, point={}, point_index=0, score=40.0)]
    cells += [_Tuned(task=task, strategy="mixcse", seed=9, point={"mixcse.lam": v}, point_index=i, score=50.0)
              for v, i in zip(lams, folders, strict=True)]
    row = tuning.tuning_table(spec, cells)["text"]["mixcse"]
    assert row.best == {"mixcse.lam": 0.1}
    assert row.inert_knob == ["mixcse.lam"] and row.knob_spread == {"mixcse.lam": 0.0}
    assert row.grid_edge == {}
