"""A comparison's records and report, on one tiny real comparison (vision, 3 strategies x 3 seeds):
``summary.json`` holds every cell's record, ``summary.md`` recomputes from ``summary.json`` alone (each number
computed here independently: NumPy, SciPy, a hand-written Holm and power), ``report.html`` opens with the
forest plot and a verdict table, and its images are the ``plots/`` files byte for byte; a NaN score and a
comparison without spread are stated as what they are."""

from __future__ import annotations

import base64
import json
import math
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from scipy import optimize, stats

from hardmix.cli import main as cli
from hardmix.compare.command import refuse_unlearned
from hardmix.compare.summary_types import ComparisonSummary
from hardmix.compare.tables import verdict_table
from hardmix.training import read_results
from hardmix.training.metrics import read_metrics
from hardmix.utils.errors import ConfigError
from tests.compare.markdown_tables import holm, parse_tables

SEEDS = [1, 2, 3]
STRATEGIES = ["none", "mixcse", "mochi"]
SCORE = "knn_top5"  # a held-out test score (not the selection score)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory, tiny_vision_config) -> Path:
    """A finished tiny real comparison: its folder."""
    root = tmp_path_factory.mktemp("report")
    cfg = tiny_vision_config(data={"max_samples": 128, "val_samples": 20},
                             train={"epochs": 1, "save_steps": 0},
                             eval={"at_end": True, "eval_steps": 2, "linear_epochs": 5})
    (root / "vision.yaml").write_text(yaml.safe_dump(cfg))
    spec = {
        "seeds": SEEDS,
        "baseline": "none",
        "strategies": {
            "none": [{"name": "none"}],
            "mixcse": [{"name": "mixcse", "lam": 0.2}],
            "mochi": [{"name": "mochi", "n_hard": 8, "n_pair": 8, "n_query": 4}],
        },
        "tasks": {"vision": {"config": str(root / "vision.yaml"), "score": SCORE}},
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = root / "cmp"
    args = ["compare", str(root / "spec.yaml"), "--output", str(out), "--jobs", "2", "--threads", "2"]
    assert cli(args) == 0
    return out


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# ------------------------------------------------------------------------------------ summary.json
def test_summary_json_holds_every_cell_s_record(comparison):
    summary = _summary(comparison)
    cells = summary["cell_records"]
    assert summary["cells"] == summary["finished"] == len(cells) == len(SEEDS) * len(STRATEGIES)
    assert {(c["strategy"], c["seed"]) for c in cells} == {(s, k) for s in STRATEGIES for k in SEEDS}
    for c in cells:
        run = comparison / "runs" / c["task"] / c["strategy"] / f"seed{c['seed']}"
        record = read_results(run)
        assert c["final_scores"] == record["final_scores"] and set(c["final_scores"]) >= {"knn_top1", SCORE}
        assert c["best_step"] == record["best_step"] and c["training_seconds"] == record["wall_seconds"]
        assert c["selection_metric"] == record["selection_metric"]
        # the evaluations: each metrics.jsonl line with the selection score, with the numbers logged there
        lines = read_metrics(run)
        evals = [r for r in lines if c["selection_metric"] in r]
        assert [e["step"] for e in c["evaluations"]] == [r["step"] for r in evals] and len(evals) >= 2
        for e, line in zip(c["evaluations"], evals):
            assert e[c["selection_metric"]] == line[c["selection_metric"]]
            logged = [r for r in lines if c["selection_metric"] not in r and r["step"] == e["step"]]
            assert logged, "the test config logs every step"
            for k, v in logged[-1].items():
                if isinstance(v, (int, float)) and k not in ("step", "epoch"):
                    assert e[k] == v, k
            assert all(isinstance(v, (int, float)) for v in e.values())
        assert any(k.endswith("proxy_acc") or k == "loss" for e in c["evaluations"] for k in e)
        # the compared score per seed is the cell's
        assert summary["tasks"]["vision"]["strategies"][c["strategy"]]["seeds"][str(c["seed"])] == \
            c["final_scores"][SCORE]


def _row(table: dict, strategy: str) -> dict:
    return next(r for r in table["rows"] if r["strategy"] == strategy)


def _num(text: str) -> float:
    return math.nan if text == "n/a" else float(text.replace("<", ""))


def _check_interval(cell: str, diffs: np.ndarray) -> None:
    m = re.fullmatch(r"([+-]\d+\.\d\d) \[(-?\d+\.\d\d), (-?\d+\.\d\d)\]", cell)
    assert m, cell
    lo, hi = stats.t.interval(0.95, diffs.size - 1, loc=diffs.mean(), scale=stats.sem(diffs))
    assert [float(x) for x in m.groups()] == [round(diffs.mean(), 2), round(lo, 2), round(hi, 2)]


def _power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Two-sided paired t-test power by the noncentral t (SciPy), independent of statsmodels."""
    crit = stats.t.ppf(1 - alpha / 2, n - 1)
    nc = effect * math.sqrt(n)
    # the lower tail vanishes for large effects (SciPy then returns NaN for it)
    return stats.nct.sf(crit, n - 1, nc) + np.nan_to_num(stats.nct.cdf(-crit, n - 1, nc))


def _p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def recompute(summary: dict, markdown: str) -> int:
    """Check every number of ``summary.md`` against ``summary.json``'s seeds and cells, computed here;
    returns how many cells were checked."""
    tables = parse_tables(markdown)
    checked = 0
    base_name = summary["baseline"]
    for task, t in summary["tasks"].items():
        cells = [c for c in summary["cell_records"] if c["task"] == task]
        score = {(c["strategy"], str(c["seed"])): c["final_scores"].get(t["score"]) for c in cells}
        strategies = list(dict.fromkeys(c["strategy"] for c in cells))
        base = {k: v for (s, k), v in score.items() if s == base_name}
        pvals, per = {}, {}
        for s in strategies:
            if s == base_name:
                continue
            seeds = [k for k in base if (s, k) in score]
            x = np.array([np.nan if score[(s, k)] is None else score[(s, k)] for k in seeds], dtype=float)
            y = np.array([np.nan if base[k] is None else base[k] for k in seeds], dtype=float)
            per[s] = (x, y)
            if np.isfinite(x).all() and np.isfinite(y).all() and x.size > 1 and np.std(x - y) > 1e-9:
                pvals[s] = stats.ttest_rel(x, y).pvalue
        adjusted = dict(zip(pvals, holm(list(pvals.values()))))
        main = next(tb for tb in tables if tb["title"] == task and "strategy" in tb["head"])
        verdicts = next(tb for tb in tables if tb["title"] == "Verdicts")
        for s in strategies:
            row = _row(main, s)
            mine = [c for c in cells if c["strategy"] == s]
            values = np.array([c["final_scores"][t["score"]] for c in mine
                               if c["final_scores"].get(t["score"]) is not None], dtype=float)
            mean, sd = row[f"{t['score']} (mean ± std)"].split(" ± ")
            assert (float(mean), float(sd)) == (round(values.mean(), 2), round(values.std(ddof=1), 2))
            assert int(row["n"]) == values.size
            seconds = np.mean([c["training_seconds"] for c in mine])
            assert row["train s / run"] == f"{seconds:.0f}"
            se_key = t["score"] + "_se"
            ses = [c["final_scores"][se_key] for c in mine if c["final_scores"].get(se_key) is not None]
            assert row["eval SE"] == (f"{np.mean(ses):.2f}" if ses else "n/a")
            checked += 5
            if s == base_name:
                assert row[f"Δ vs {base_name} [95% CI]"] == "(baseline)"
                continue
            x, y = per[s]
            vrow = next(r for r in verdicts["rows"] if r["task"] == task and r["strategy"] == s)
            if s not in pvals:  # degenerate: stated, never significant
                assert row["verdict"] == vrow["verdict"] and row["verdict"] not in ("better", "worse")
                assert row["p"] == row["p_holm"] == "n/a"
                expected = ("NaN score" if not (np.isfinite(x).all() and np.isfinite(y).all())
                            else "too few seeds" if x.size < 2 else "no spread")
                unlearned = (summary["tasks"][task].get("learned") or {}).get(base_name, {}).get("verdict") \
                    is False  # the mark of a baseline not shown to beat its start (a tiny run cannot learn)
                mark = ["(baseline not shown to beat its start)"] * unlearned
                assert row["verdict"] == " ".join([expected, *mark])
                checked += 3
                continue
            d = x - y
            _check_interval(row[f"Δ vs {base_name} [95% CI]"], d)
            _check_interval(vrow[f"Δ vs {base_name} [95% CI]"], d)
            assert row["p"] == vrow["p"] == _p_text(pvals[s])
            assert row["p_holm"] == vrow["p_holm"] == _p_text(adjusted[s])
            effect = d.mean() / d.std(ddof=1)
            assert row["effect size"] == f"{effect:.2f}"
            # the effect the test detects with 80% power at Holm's strictest alpha (0.05 over the tested
            # family), solved here by root-finding on SciPy's noncentral t
            strictest = 0.05 / len(pvals)
            d80 = optimize.brentq(lambda e, n=d.size, a=strictest: _power(e, n, a) - 0.8, 1e-3, 30.0)
            assert row["MDD (80%)"] == f"{d80 * d.std(ddof=1):.2f}"
            verdict = ("better" if d.mean() > 0 else "worse") if adjusted[s] < 0.05 else "n.s."
            assert row["verdict"].split(" (")[0] == vrow["verdict"].split(" (")[0] == verdict
            checked += 7
        # the other final scores: mean ± std over the cells
        other = [tb for tb in tables if tb["title"] == task and "strategy" in tb["head"] and tb is not main]
        for tb in other:
            for key in tb["head"][1:]:
                for s in strategies:
                    vals = [c["final_scores"][key] for c in cells if c["strategy"] == s
                            and c["final_scores"].get(key) is not None]
                    expected = f"{np.mean(vals):.2f} ± {np.std(vals, ddof=1) if len(vals) > 1 else 0.0:.2f}"
                    assert _row(tb, s)[key] == expected, (s, key)
                    checked += 1
    return checked


def test_summary_md_recomputes_from_summary_json_alone(comparison):
    summary = _summary(comparison)
    markdown = (comparison / "summary.md").read_text()
    assert recompute(summary, markdown) >= 3 * 5 + 2 * 7
    assert "Few seeds: comparisons over 3 paired seeds (fewer than 5)" in markdown
    assert "2 degrees of freedom" in markdown and "knn_top5 is held out" in markdown


def test_degenerate_scores_are_stated_never_significant(comparison, tmp_path, capsys):
    """A NaN score and identical scores (no spread), written into real cells' results, then --report-only:
    the verdicts say what they are and the markdown still recomputes."""
    out = tmp_path / "cmp"
    shutil.copytree(comparison, out)
    for seed in SEEDS:  # mochi: every seed exactly the baseline's score + 1 (no spread of the differences)
        base = read_results(out / "runs" / "vision" / "none" / f"seed{seed}")["final_scores"][SCORE]
        path = out / "runs" / "vision" / "mochi" / f"seed{seed}" / "results.json"
        record = json.loads(path.read_text())
        record["final_scores"][SCORE] = base + 1.0
        path.write_text(json.dumps(record))
    path = out / "runs" / "vision" / "mixcse" / "seed2" / "results.json"
    record = json.loads(path.read_text())
    record["final_scores"][SCORE] = None  # how a NaN score is written
    path.write_text(json.dumps(record))
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    printed = capsys.readouterr().out
    summary = _summary(out)
    paired = summary["tasks"]["vision"]["paired"]
    assert paired["mochi"]["verdict"] == "no spread" and paired["mochi"]["p_value"] is None
    assert paired["mochi"]["mean"] == pytest.approx(1.0)
    assert paired["mixcse"]["verdict"] == "NaN score" and paired["mixcse"]["p_holm"] is None
    assert summary["tasks"]["vision"]["strategies"]["mixcse"]["nan_seeds"] == [2]
    markdown = (out / "summary.md").read_text()
    recompute(summary, markdown)
    assert "no spread (every paired difference is the same" in markdown
    assert "NaN score (a run scored NaN" in markdown
    assert "no spread" in printed and "NaN score" in printed


# ------------------------------------------------------------------------------------ report.html
class _Report(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[str, str]] = []  # (tag, alt or heading text) in document order
        self.images: dict[str, str] = {}
        self.tables: list[list[list[str]]] = []
        self._heading: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.order.append(("img", a["alt"]))
            self.images[a["alt"]] = a["src"]
        elif tag == "table":
            self.order.append(("table", ""))
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("h1", "h2", "h3"):
            self._heading = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell or []))
            self._cell = None
        elif tag in ("h1", "h2", "h3"):
            self.order.append((tag, self._heading or ""))
            self._heading = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._heading is not None:
            self._heading += data


def test_the_report_opens_with_the_forest_plot_and_a_verdict_table(comparison):
    parser = _Report()
    parser.feed((comparison / "report.html").read_text())
    kinds = [k for k, _ in parser.order if k in ("img", "table")]
    assert parser.order[[k for k, _ in parser.order].index("img")] == ("img", "forest")
    assert kinds[:2] == ["img", "table"]  # the forest plot first, then the verdict table
    verdicts = parser.tables[0]
    assert verdicts[0] == ["task", "score", "strategy", "Δ vs none [95% CI]", "n", "p", "p_holm", "p_exact",
                           "p_exact_holm", "verdict"]
    assert [r[2] for r in verdicts[1:]] == ["mixcse", "mochi"]
    summary = _summary(comparison)
    for r in verdicts[1:]:
        assert r[-1].split(" (")[0] == summary["tasks"]["vision"]["paired"][r[2]]["verdict"]
    # every plot of plots/ is in the report, byte for byte, and decodes as a PNG
    files = {p.stem: p for p in (comparison / "plots").glob("*.png")}
    assert set(files) == set(parser.images) >= {"forest", "scores", "selection_curves", "dynamics"}
    for name, src in parser.images.items():
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1])
        assert data == files[name].read_bytes(), name
        with Image.open(files[name]) as im:
            assert im.format == "PNG" and min(im.size) > 100
    assert len(parser.tables) >= 3


def test_the_tuning_section_renders_when_the_summary_has_one(comparison, tmp_path):
    from hardmix.compare.report import summary_markdown, write_html

    summary = _summary(comparison)
    summary["tuning"] = {
        "vision": {
            s: {"score": "knn_top1", "steps_per_run": 10, "runs": 4,
                "grid": [{"point": {"lam": lam}, "seeds": {"7": 30.0 + lam, "8": 31.0 + lam},
                          "mean": 30.5 + lam, "failed": {}} for lam in (0.1, 0.2)],
                "best": {"lam": 0.2}, "all_failed": False, "grid_edge": None, "knob_spread": {},
                "score_se": None, "score_se_from": None, "inert_knob": None}
            for s in STRATEGIES
        }
    }
    summary = ComparisonSummary.from_json(summary)
    markdown = summary_markdown(summary)
    tables = parse_tables(markdown)
    budget = next(tb for tb in tables if tb["title"] == "Tuning" and "steps in all" in tb["head"])
    assert [r["steps in all"] for r in budget["rows"]] == ["40"] * 3
    grid = next(tb for tb in tables if "mean knn_top1" in tb["head"])
    assert [(r["point"], r["seed 7"], r["mean knn_top1"], r["chosen"]) for r in grid["rows"]] == [
        ("lam=0.1", "30.10", "30.60", ""), ("lam=0.2", "30.20", "30.70", "✓")]
    page = write_html(summary, {}, [comparison / "plots" / "forest.png"], tmp_path / "report.html", tmp_path)
    page = page.read_text()
    assert "<h2>Tuning</h2>" in page and page.index("forest") < page.index("<h2>Tuning</h2>")


# ------------------------------------------------------------------------------- did they learn?
def _records(out: Path) -> dict:
    return {(s, seed): out / "runs" / "vision" / s / f"seed{seed}" / "results.json"
            for s in STRATEGIES for seed in SEEDS}


def _edit(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_the_start_row_and_each_strategy_s_learned_entry_recompute_from_the_cells(comparison):
    summary = _summary(comparison)
    t = summary["tasks"]["vision"]
    records = {k: json.loads(p.read_text()) for k, p in _records(comparison).items()}
    # the start row: the baseline's cells' start, per seed (vision's start depends on the seed)
    assert t["start"]["status"] == "measured"
    assert t["start"]["seeds"] == {str(seed): records[("none", seed)]["start_scores"][SCORE]
                                   for seed in SEEDS}
    starts = np.array([records[("none", seed)]["start_scores"][SCORE] for seed in SEEDS])
    assert t["start"]["mean"] == pytest.approx(starts.mean()) and t["start"]["depends_on_seed"]
    assert set(t["start"]["scores"]) == set(records[("none", 1)]["final_scores"])
    for s in STRATEGIES:  # each strategy against its own cells' start, paired seed by seed
        d = np.array([records[(s, seed)]["final_scores"][SCORE] - records[(s, seed)]["start_scores"][SCORE]
                      for seed in SEEDS])
        lr = t["learned"][s]
        assert lr["mean"] == pytest.approx(d.mean()) and lr["n"] == len(SEEDS)
        if np.ptp(d) > 0:
            lo, _ = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=stats.sem(d))
            assert lr["ci_low"] == pytest.approx(lo) and lr["verdict"] is bool(lo > 0)
    markdown = (comparison / "summary.md").read_text()
    assert "Did they learn? Each against its cells' starting encoder (vision):" in markdown
    assert f"| start | {t['start']['mean']:.2f} ± {t['start']['std']:.2f} |" in markdown


def test_each_seed_s_start_is_measured_by_one_cell_and_read_by_the_others(comparison):
    """The cells of one seed start from the same untrained network whatever their strategy: one of them
    measured it, the others read it from the comparison's start cache (the after-the-fact test below
    scores every cell's start again from its own config, and finds the same numbers)."""
    records = {k: json.loads(p.read_text()) for k, p in _records(comparison).items()}
    files = sorted((comparison / "start_cache").glob("*.json"))
    assert len(files) == len(SEEDS)
    for seed in SEEDS:
        cells = [records[(s, seed)] for s in STRATEGIES]
        shared = [r["start_shared_from"] for r in cells]
        assert shared.count(None) == 1, shared
        source = {Path(x) for x in shared if x is not None}
        assert len(source) == 1 and source <= set(files)
        assert all(r["start_scores"] == cells[0]["start_scores"] for r in cells)


def test_a_baseline_below_its_start_marks_every_verdict_and_strict_refuses(comparison, tmp_path, capsys):
    out = tmp_path / "cmp"
    shutil.copytree(comparison, out)
    for (_, seed), path in _records(out).items():  # every start: 5 + seed points above the cell's end
        _edit(path, lambda r, seed=seed: r["start_scores"].update(
            {SCORE: r["final_scores"][SCORE] + 5 + seed}))
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    printed = capsys.readouterr().out
    summary = _summary(out)
    lr = summary["tasks"]["vision"]["learned"]["none"]
    assert lr["mean"] == pytest.approx(-7.0) and lr["verdict"] is False
    verdicts = [r[-1] for r in verdict_table(ComparisonSummary.from_json(summary))[1]]
    assert verdicts and all(v.endswith("(baseline not shown to beat its start)") for v in verdicts)
    markdown = (out / "summary.md").read_text()
    assert "`none` was not shown to beat its starting encoder (-7.00 [" in markdown
    assert "(baseline not shown to beat its start)" in printed
    # --strict (whose exact-test floor refuses these 3 seeds first) refuses it in one line
    with pytest.raises(ConfigError, match=r"^--strict: the baseline none was not shown to beat its "
                                          r"starting encoder on vision \(-7\.00 knn_top5\)"):
        refuse_unlearned(ComparisonSummary.from_json(summary))
    for path in _records(out).values():  # the starts below the ends: nothing to refuse
        _edit(path, lambda r: r["start_scores"].update({SCORE: r["final_scores"][SCORE] - 1}))
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    refuse_unlearned(ComparisonSummary.from_json(_summary(out)))


def test_records_without_a_start_are_never_reported_as_learned(comparison, tmp_path, capsys):
    out = tmp_path / "cmp"
    shutil.copytree(comparison, out)
    paths = _records(out)
    for path in paths.values():  # a record of an older hardmix: no start, no code
        _edit(path, lambda r: [r.pop(k, None) for k in ("start_scores", "start_scores_other", "learned",
                                                        "code")])
    _edit(paths[("mochi", 2)], lambda r: r.update(code={"commit": "b" * 40, "dirty": False}))
    _edit(paths[("mochi", 3)], lambda r: r.update(code={"commit": "c" * 40, "dirty": True}))
    assert cli(["compare", str(out / "spec.yaml"), "--output", str(out), "--report-only"]) == 0
    summary = _summary(out)
    refuse_unlearned(ComparisonSummary.from_json(summary))  # not measured: nothing for --strict to refuse
    t = summary["tasks"]["vision"]
    assert t["start"]["status"] == "start not measured" and t["start"]["mean"] is None
    assert all(t["learned"][s]["verdict"] is None and t["learned"][s]["status"] == "start not measured"
               for s in STRATEGIES)
    markdown = (out / "summary.md").read_text()
    assert "| start | n/a | 0 |  | start not measured |" in markdown
    assert "whether `none` learned is not known; no verdict here says it did" in markdown
    # the code that trained the cells: two commits and older records, listed
    code = summary["code"]
    assert code["mixed"] and code["commits"] == ["b" * 40, "c" * 40]
    assert code["counts"] == {"not recorded": 7, "bbbbbbbbbbbb": 1, "cccccccccccc+dirty": 1}
    assert code["cells"]["bbbbbbbbbbbb"] == ["vision/mochi/seed2"]
    assert "The cells were trained by different code: " in markdown
    assert "trained by different code" in capsys.readouterr().out


def test_the_start_measured_after_the_fact_equals_the_one_each_cell_measured(comparison, tmp_path, capsys):
    """``--measure-start`` on a comparison whose records hold no start (an older hardmix's) scores each
    seed's untrained network from the cells' recorded configs, once per seed for every strategy's cells:
    the same numbers the cells measured before their first step, and the summary's start row and learned
    entries are computed from them and say where they came from."""
    out = tmp_path / "cmp"
    shutil.copytree(comparison, out)
    paths = _records(out)
    measured = {k: json.loads(p.read_text())["start_scores"] for k, p in paths.items()}
    for path in paths.values():  # a record of an older hardmix: no start
        _edit(path, lambda r: [r.pop(k, None) for k in ("start_scores", "start_scores_other", "learned")])
    spec = str(out / "spec.yaml")
    assert cli(["compare", spec, "--output", str(out), "--measure-start", "--threads", "2"]) == 0
    err = capsys.readouterr().err
    files = sorted((out / "start" / "vision").glob("seed*_*.json"))
    assert len(files) == len(SEEDS) and err.count("hardmix: measuring the start") == len(SEEDS)
    entries = {e["seed"]: e for e in (json.loads(f.read_text()) for f in files)}
    assert sorted(entries) == SEEDS
    for seed, e in entries.items():
        assert sorted(e["cells"]) == sorted(f"vision/{s}/seed{seed}" for s in STRATEGIES)
        assert e["code"]["commit"] and e["how"] == "measured after the fact by --measure-start"
        for s in STRATEGIES:  # every strategy's cell measured this very start before its first step
            assert set(e["scores"]) == set(measured[(s, seed)])
            for k, v in measured[(s, seed)].items():
                assert e["scores"][k] == pytest.approx(v, abs=1e-6), (s, seed, k)
    summary = _summary(out)
    t = summary["tasks"]["vision"]
    assert t["start"]["status"] == "measured" and t["start"]["depends_on_seed"]
    assert t["start"]["seeds"] == {str(seed): entries[seed]["scores"][SCORE] for seed in SEEDS}
    assert t["start"]["source"] == f"measured after the fact by --measure-start on {entries[1]['date']}"
    assert t["start"]["files"] == sorted(str(f.relative_to(out)) for f in files)
    records = {k: json.loads(p.read_text()) for k, p in paths.items()}
    for s in STRATEGIES:  # learned: each cell's end against its seed's start measured after the fact
        d = np.array([records[(s, seed)]["final_scores"][SCORE] - entries[seed]["scores"][SCORE]
                      for seed in SEEDS])
        lr = t["learned"][s]
        assert lr["mean"] == pytest.approx(d.mean()) and lr["n"] == len(SEEDS) and lr["status"] == "measured"
    markdown = (out / "summary.md").read_text()
    assert f"| {t['start']['source']} |" in markdown
    # resumable: measured once; --report-only then writes the same start row again
    before = [f.read_text() for f in files]
    assert cli(["compare", spec, "--output", str(out), "--measure-start"]) == 0
    assert "every finished cell's start is measured already" in capsys.readouterr().err
    assert [f.read_text() for f in files] == before
    assert cli(["compare", spec, "--output", str(out), "--report-only"]) == 0
    assert _summary(out)["tasks"]["vision"]["start"] == t["start"]
    # a start file of another start (another seed's network) is never used for a cell
    files[0].rename(files[0].with_name("seed9_" + files[0].name.split("_", 1)[1]))
    assert cli(["compare", spec, "--output", str(out), "--report-only"]) == 0
    assert _summary(out)["tasks"]["vision"]["learned"]["none"]["status"] == \
        f"measured in {len(SEEDS) - 1} of {len(SEEDS)} cells"
