"""docs/results.md quotes the comparisons as ``hardmix compare`` wrote them: every number of the block between
the markers is recomputed here from the committed ``summary.json`` (its per-seed scores), so the two cannot
drift, and the block must equal the tool's own Markdown of that summary (``verdicts_markdown``). Every
committed summary's exact sign-flip p-values are recomputed by enumerating every sign pattern."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from scipy import stats

from hardmix.compare.report import verdicts_markdown
from hardmix.compare.summary_types import ComparisonSummary
from hardmix.strategies import MixCSE, NoMixing
from tests.compare.markdown_tables import holm, parse_tables
from tests.run_records import measured_starts

ROOT = Path(__file__).resolve().parents[2]
CPU_FULL = ROOT / "results/superseded/compare_cpu_full"  # retired: the premise search quotes its text runs
COMMITTED = ("premise", "precision", "peak_fair")
BLOCK = re.compile(
    r"<!-- hardmix compare: (?P<path>\S+) -->\n(?P<body>.*?)<!-- end of hardmix compare -->", re.S
)


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _check_task(summary: dict, task: str, table: dict) -> int:
    t = summary["tasks"][task]
    base_name = summary["baseline"]
    paired = _paired(summary, task)
    checked = 0
    for r in table["rows"]:
        s = r["strategy"]
        values = np.array(list(t["strategies"][s]["seeds"].values()), dtype=float)
        assert r[f"{t['score']} (mean ± std)"] == f"{values.mean():.2f} ± {values.std(ddof=1):.2f}", s
        assert r["n"] == str(values.size)
        seconds = r.get("train s / run", r.get("wall s / run"))
        assert seconds == f"{t['strategies'][s]['wall_seconds_mean']:.0f}", s
        checked += 3
        if s == base_name:
            continue
        x = paired[s]
        assert r[f"Δ vs {base_name} [95% CI]"] == f"{x['mean']:+.2f} [{x['lo']:.2f}, {x['hi']:.2f}]", s
        assert r["p"] in (f"{x['p']:.3f}", _p(x["p"])), s
        checked += 2
        assert r["p_holm"] == _p(x["p_holm"]) and r["p_exact_holm"] == _p(x["p_exact_holm"])
        expected = ("better" if x["mean"] > 0 else "worse") if x["p_holm"] < 0.05 else "n.s."
        if expected != "n.s." and x["p_exact_holm"] >= 0.05:
            expected += " (t-test only)"
        unlearned = ("(baseline not shown to beat its start)" if t["learned"][base_name]["verdict"] is False
                     else "")
        differ = (t.get("arm_differences") or {}).get(s)
        differs = f"(differs: {'; '.join(differ)})" if differ else ""
        marks = (expected, _edge(summary, task, s), unlearned, differs)
        assert r["verdict"] == " ".join(v for v in marks if v)
        checked += 3
    return checked


def _edge(summary: dict, task: str, strategy: str) -> str:
    """The mark beside a verdict, recomputed from the cell records: of the strategy's and the baseline's
    cells, how many selected their first or their last evaluated step (a cell evaluated once: both)."""
    cells = [c for c in summary["cell_records"]
             if c["task"] == task and c["strategy"] in (strategy, summary["baseline"]) and c["evaluations"]]
    first = sum(c["best_step"] == c["evaluations"][0]["step"] for c in cells)
    last = sum(c["best_step"] == c["evaluations"][-1]["step"] for c in cells)
    n = len(cells)
    if first == last == n > 0:
        return f"(edge: {n}/{n} evaluated once)"
    parts = [f"{k}/{n} at {w}" for k, w in ((first, "first"), (last, "last")) if k]
    return f"(edge: {', '.join(parts)} step)" if parts else ""


def test_results_md_quotes_the_comparisons_as_the_tool_wrote_them() -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    blocks = list(BLOCK.finditer(text))
    assert blocks, "docs/results.md quotes no comparison"
    for block in blocks:
        summary = json.loads((ROOT / block["path"]).read_text(encoding="utf-8"))
        count = summary["cells"]
        assert summary["finished"] == count, f"{block['path']}: not every run finished"
        body = block["body"].strip()
        # exactly the tool's Markdown, less the start tables (its notes say whether each baseline learned)
        typed = ComparisonSummary.from_json(summary)
        assert body == verdicts_markdown(typed, learned=False).strip(), block["path"]
        tables = parse_tables(body)
        checked = 0
        for task in summary["tasks"]:
            mine = [tb for tb in tables if tb["title"] == task]
            assert mine, f"{block['path']}: no table of {task}"
            checked += _check_task(summary, task, mine[0])
        assert checked > 10, block["path"]


def _sign_flip(d: np.ndarray) -> float:
    """The exact two-sided sign-flip p, every sign pattern enumerated; ties with the observed |sum| count
    as at least as extreme (up to rounding of the sums)."""
    import itertools

    observed = abs(d.sum())
    tol = 1e-9 * max(1.0, float(np.abs(d).max()))
    patterns = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    return float(np.mean(np.abs(patterns @ d) >= observed - tol))


def test_every_committed_summary_carries_the_exact_test_recomputed():
    """``summary.json`` of every committed comparison holds, per paired comparison, the exact sign-flip p,
    its Holm correction and the smallest p its n can give, as an independent enumeration recomputes them."""
    for name in COMMITTED:
        summary = json.loads((ROOT / f"results/compare_{name}/summary.json").read_text())
        for task in summary["tasks"]:
            mine = _paired(summary, task)
            for s, p in summary["tasks"][task]["paired"].items():
                assert p["p_exact"] == pytest.approx(mine[s]["p_exact"], abs=1e-12), (name, task, s)
                assert p["p_exact_holm"] == pytest.approx(mine[s]["p_exact_holm"], abs=1e-12), (name, task, s)
                assert p["p_exact_min"] == 2 / 2 ** p["n"], (name, task, s)


def _detectable(sd: float, n: int, m: int = 1) -> float:
    """The paired difference found with 80% power at alpha 0.05 / m (two-sided; Holm's strictest step in a
    family of m), from the noncentral t."""
    crit = stats.t.ppf(1 - 0.025 / m, n - 1)

    def power(effect: float) -> float:
        nc = effect * np.sqrt(n)
        return stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid) < 0.8 else (lo, mid)
    return hi * sd


def _paired(summary: dict, task: str) -> dict[str, dict]:
    """Each strategy of a task against the summary's baseline, recomputed from the per-seed scores: the
    paired differences, their mean and 95% interval, the paired t-test's p, Holm's p over the task's
    strategies and the difference detectable at 80% power."""
    t = summary["tasks"][task]
    base = t["strategies"][summary["baseline"]]["seeds"]
    diffs = {
        s: np.array([v["seeds"][k] - base[k] for k in v["seeds"] if k in base])
        for s, v in t["strategies"].items()
        if s != summary["baseline"]
    }
    pvals = {s: stats.ttest_1samp(d, 0.0).pvalue for s, d in diffs.items()}
    adjusted = dict(zip(pvals, holm(list(pvals.values()))))
    exact = {s: _sign_flip(d) for s, d in diffs.items()}
    exact_adjusted = dict(zip(exact, holm(list(exact.values()))))
    paired = {}
    for s, d in diffs.items():
        lo, hi = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=stats.sem(d))
        paired[s] = {"mean": d.mean(), "lo": lo, "hi": hi, "p": pvals[s], "p_holm": adjusted[s],
                     "p_exact": exact[s], "p_exact_holm": exact_adjusted[s],
                     "detectable": _detectable(d.std(ddof=1), d.size, len(diffs))}
    return paired


def quote(x: dict) -> str:
    """How docs quote a paired comparison: the difference, its 95% interval, Holm's p of the t-test and of
    the exact sign-flip test, and the difference the seeds detect at the verdicts' alpha."""
    return (f"{x['mean']:+.2f} [{x['lo']:.2f}, {x['hi']:.2f}] (p_holm {_p(x['p_holm'])}, exact "
            f"{_p(x['p_exact_holm'])}, detectable {x['detectable']:.2f})")


def short_quote(x: dict) -> str:
    """How the README quotes it: the difference, Holm's p of both tests."""
    return f"{x['mean']:+.2f} (p_holm {_p(x['p_holm'])}, exact {_p(x['p_exact_holm'])})"


def _summary_of(name: str) -> dict:
    return json.loads((ROOT / f"results/compare_{name}/summary.json").read_text())


# ------------------------------------------------------------------------ the premise search's numbers
def _records(folder: Path) -> list[dict]:
    """A run's ``metrics.jsonl``, one dict a line."""
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def _premise_runs() -> dict:
    path = ROOT / "results/premise_search_2026-12-02/summary.json"
    return json.loads(path.read_text())["runs"]


def _dev_curve(name: str) -> list[str]:
    lines = _records(ROOT / "results/premise_search_2026-12-02/text" / name)
    return [f"{x['stsb_dev']:.2f}" for x in lines if "stsb_dev" in x]


def test_the_premise_search_table_recomputes_from_its_records():
    """Every row of the search's README table, and the curves and figures docs/results.md and
    premise.yaml quote, from the runs' records."""
    readme = (ROOT / "results/premise_search_2026-12-02/README.md").read_text()
    rows = parse_tables(readme)[0]["rows"]
    runs = list(_premise_runs().values())
    assert len(rows) == len(runs) == 7
    for row, run in zip(rows, runs, strict=True):
        after = [a for s, a in run["proxy_acc"] if s > 40]
        cells = list(row.values())
        assert int(cells[1].replace(",", "")) == run["steps"]
        assert float(cells[2]) in (round(run["cpu_seconds"]), run["cpu_seconds"])
        assert float(cells[3]) == round(max(after), 2)
        first = run["first_step_over_0.8"]
        assert cells[4] == ("-" if first is None else f"{first:,}")
        assert float(cells[5]) == round(run["final_proxy_acc"], 2)
        assert float(cells[6]) == round(run["val_knn_top1"], 1)
    # The text curves, in the README and in docs/results.md.
    long, short = _dev_curve("simcse_lr1e-5_100"), _dev_curve("simcse_lr1e-5_40")
    flat = " ".join(readme.split())
    assert ", ".join(long).replace("51.40", "**51.40** (step 40)") in flat
    assert ", ".join(short).replace("50.93", "**50.93** (step 40)") in flat
    doc = " ".join((ROOT / "docs/results.md").read_text().split())
    assert f"({long[3]}, then down to {long[-1]})" in doc
    assert f"({short[0]} at step 5 to {short[-1]} at step 40)" in doc
    failed = [max(a for s, a in r["proxy_acc"] if s > 40) for r in runs if r["first_step_over_0.8"] is None]
    passed = sorted((r["steps"], r["first_step_over_0.8"]) for r in runs if r["first_step_over_0.8"])
    assert (f"passed 0.8, with K 64 (at step {passed[0][1]:,} of {passed[0][0]:,}) and with K 256 at 16 "
            f"pixels (at step {passed[1][1]:,} of {passed[1][0]:,})") in doc and len(passed) == 2
    assert f"at most {min(failed):.2f} to {max(failed):.2f} in five cheaper" in doc and len(failed) == 5
    path = ROOT / "results/single_runs_2026-12-02/vision_metrics.jsonl"
    vision = [json.loads(x) for x in path.read_text().splitlines()]
    k4096 = max(x["proxy_acc"] for x in vision if "proxy_acc" in x and x["step"] > 40)
    assert f"was at most {k4096:.2f} with K 4096" in doc
    # The cpu_full comparison's text runs: where each selected its model.
    tuning = [json.loads(p.read_text()) for p in CPU_FULL.glob("tune/text/*/*/*/results.json")]
    evaluation = [json.loads(p.read_text()) for p in CPU_FULL.glob("runs/text/*/*/results.json")]
    steps = {(r["best_step"], r["total_steps"]) for r in tuning + evaluation}
    ((best, total),) = steps
    n_text = len(tuning) + len(evaluation)
    assert (f"(all {n_text} text runs of the retired `results/superseded/compare_cpu_full`, {len(tuning)} "
            f"tuning and {len(evaluation)} evaluation, selected step {best} of {total})") in doc


# ------------------------------------------------------------------ the premise comparison's regime
def _cells(task: str) -> list[Path]:
    root = ROOT / "results/compare_premise/runs" / task
    return sorted(p.parent for p in root.glob("*/seed*/results.json"))


def test_the_premise_comparison_ran_where_its_premises_hold():
    """Every vision cell of compare_premise logged a proxy accuracy (the 0-1 fraction) over 0.8 before its
    last step, every strategy has 10 seeds, and every figure docs/results.md quotes about it (the regime's,
    the tuning's, the superseded cells' and the verdicts', recomputed from the records) is the records' own,
    as README.md and docs/strategies.md quote them too."""
    summary = json.loads((ROOT / "results/compare_premise/summary.json").read_text())
    assert summary["finished"] == summary["cells"] == 60
    for task in ("text", "vision"):
        assert all(len(v["seeds"]) == 10 for v in summary["tasks"][task]["strategies"].values())
    # tuned like compare_cpu_full (its tuning seeds), every strategy of both tasks on 5 points, on the
    # selection score; the section names what tuning chose
    premise = ROOT / "results/compare_premise"
    for task in ("text", "vision"):
        for strategy in ("none", "mixcse", "mochi"):
            points = sorted(premise.glob(f"tune/{task}/{strategy}/point*/seed*/results.json"))
            assert len(points) == 10, (task, strategy)
            assert {json.loads(p.read_text())["finished"] for p in points} == {True}
    cpu_full_grid = json.loads((CPU_FULL / "summary.json").read_text())["spec"]["tune"]
    premise_grid = summary["spec"]["tune"]
    assert premise_grid["seeds"] == cpu_full_grid["seeds"]
    assert {len(v) for g in premise_grid["grid"].values() for v in g.values()} == {5}
    firsts: dict[str, list[int]] = {}
    tails = []
    for cell in _cells("vision"):
        rows = _records(cell)
        proxy = [(r["step"], r["proxy_acc"]) for r in rows if "proxy_acc" in r]
        last = json.loads((cell / "results.json").read_text())["total_steps"]
        assert all(0.0 <= a <= 1.0 for _, a in proxy), cell
        first = next(s for s, a in proxy if a > 0.8)  # StopIteration: never passed
        assert first < last == 1440, cell
        firsts.setdefault(cell.parent.name, []).append(first)
        tail = [a for s, a in proxy if s > 0.9 * last]
        tails.append(sum(tail) / len(tail))
    every = [f for fs in firsts.values() for f in fs]
    assert len(every) == 30

    def span(values: list[int]) -> str:
        return f"{min(values):,} to {max(values):,}"

    text_cells = [json.loads((c / "results.json").read_text()) for c in _cells("text")]
    at_end = sum(r["best_step"] == r["total_steps"] for r in text_cells)
    doc = " ".join((ROOT / "docs/results.md").read_text().split())
    section = doc.split("## Where the premises hold")[1].split(" ## ")[0]
    readme = " ".join((ROOT / "README.md").read_text().split())
    strategies = " ".join((ROOT / "docs/strategies.md").read_text().split())
    by = f"MoCo-v2 {span(firsts['none'])}, MoCHi {span(firsts['mochi'])}, MixCSE {span(firsts['mixcse'])}"
    assert f"in each of the 30 vision cells, first at step {span(every)} of 1,440 ({by})" in section
    assert f"over the last 10% of each run it averaged {min(tails):.2f} to {max(tails):.2f}" in section
    assert f"{at_end} of the {len(text_cells)} text cells selected their last step" in section
    # The verdicts in prose (and in the README and docs/strategies.md): each paired difference, its
    # interval, both tests' Holm p and the detectable difference.
    for task in summary["tasks"]:
        for s, x in _paired(summary, task).items():
            assert quote(x) in section and quote(x) in strategies, (task, s)
            assert short_quote(x) in readme, (task, s)
    # Vision MixCSE's lam: chosen inside its grid; the validation score of each neighbour and of the paper's
    # 0.2 quoted; the evaluation cells run at the point chosen before (superseded, kept) and their paired
    # difference with the baseline on the same seeds.
    grid = premise_grid["grid"]["mixcse"]["mixcse.lam"]
    scores = {}
    for i, lam in enumerate(json.loads((premise / "tune/points.json").read_text())["vision"]["mixcse"]):
        seeds = sorted(premise.glob(f"tune/vision/mixcse/point{i}/seed*/results.json"))
        scores[lam["mixcse.lam"]] = np.mean([json.loads(p.read_text())["final_scores"]["val_knn_top1"]
                                             for p in seeds])
    chosen = max(scores, key=scores.get)
    assert min(grid) < chosen < max(grid) and chosen == 0.05
    below, above = max(v for v in grid if v < chosen), min(v for v in grid if v > chosen)
    assert (f"0.05 on images, inside its grid (validation k-NN {scores[chosen]:.2f}; {scores[below]:.2f} at "
            f"{below}, {scores[above]:.2f} at {above}, {scores[0.2]:.2f} at the paper's 0.2)") in section
    superseded = {r["cell"]: r for r in summary["superseded"]}
    assert sorted(superseded) == [f"vision/mixcse/seed{k}" for k in range(1, 6)]
    assert {r["point"]["mixcse.lam"] for r in superseded.values()} == {0.1}
    base = summary["tasks"]["vision"]["strategies"]["none"]["seeds"]
    old = [json.loads((premise / f"superseded/vision/mixcse/point0/seed{k}/results.json").read_text())
           ["final_scores"]["knn_top1"] for k in range(1, 6)]
    assert old == [superseded[f"vision/mixcse/seed{k}"]["score"] for k in range(1, 6)]
    diff = np.mean([o - base[str(k)] for k, o in zip(range(1, 6), old)])
    assert f"{diff:+.2f} against MoCo-v2 on seeds 1 to 5" in section


# ------------------------------------------------------------------ the sections of the comparisons
def _seed_cells(folder: Path, task: str, strategy: str) -> list[Path]:
    """A comparison's finished evaluation cells of one strategy, in seed order."""
    return sorted(p.parent for p in (folder / "runs" / task / strategy).glob("seed*/results.json"))


def _check_section(folder: Path, title: str) -> tuple[dict, str]:
    """The checks every comparison section of docs/results.md passes: each strategy has 5 seeds or more;
    each paired difference, its interval, both tests' Holm p and the difference the seeds detect are in
    the section's prose (:func:`quote`), recomputed from the per-seed scores; and every other decimal of its
    prose is one of those checked (the tool's block, the section's tables, the recomputed paired
    statistics) or a setting of the runs.
    Returns the summary and the section's text, whitespace collapsed."""
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["finished"] == summary["cells"]
    for task in summary["tasks"]:
        assert all(len(v["seeds"]) >= 5 for v in summary["tasks"][task]["strategies"].values()), task
    raw = (ROOT / "docs/results.md").read_text().split(f"## {title}")[1].split("\n## ")[0]
    section = " ".join(raw.split())
    for task in summary["tasks"]:
        for s, x in _paired(summary, task).items():
            assert quote(x) in section, (task, s)
    tables = parse_tables(raw)
    block = BLOCK.search(raw)["body"]
    prose = [x for x in raw.replace(block, "").splitlines() if not x.startswith("|")]
    # a setting of the runs: the spec's (strategies' arguments, grids) and the baseline's config
    number = re.compile(r"\d+\.\d+")
    known = set(number.findall(block)) | {v.lstrip("+-") for tb in tables for r in tb["rows"]
                                           for v in r.values()}
    for task in summary["tasks"]:
        stats_ = [x[k] for x in _paired(summary, task).values() for k in ("mean", "lo", "hi", "detectable")]
        known |= {f"{abs(v):.2f}" for v in stats_}
        known |= {_p(x[k]).lstrip("<") for x in _paired(summary, task).values()
                  for k in ("p_holm", "p_exact_holm")}
        baseline_config = folder / "runs" / task / summary["baseline"] / "seed1/config.yaml"
        known |= set(number.findall(baseline_config.read_text()))
        for x in _contrasts(summary, task).values():
            known |= {f"{abs(x[k]):.2f}" for k in ("mean", "lo", "hi")}
            known |= {_p(x[k]).lstrip("<") for k in ("p_holm", "p_exact_holm")}
    known |= set(number.findall((folder / "spec.yaml").read_text()))
    unknown = [n for n in number.findall(" ".join(prose)) if n not in known]
    assert not unknown, unknown
    return summary, section


def _contrasts(summary: dict, task: str) -> dict[str, dict]:
    """Each contrast of a task (a strategy against its control), recomputed from the per-seed scores:
    the paired t-test, Holm over the contrasts, the exact sign-flip test likewise."""
    out = {}
    per = summary["tasks"][task]["strategies"]
    pairs = summary["tasks"][task].get("contrasts") or {}
    for label, c in pairs.items():
        a, b = per[c["strategy"]]["seeds"], per[c["control"]]["seeds"]
        d = np.array([a[k] - b[k] for k in a if k in b])
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        out[label] = {"mean": d.mean(), "lo": d.mean() - half, "hi": d.mean() + half,
                      "p": stats.ttest_1samp(d, 0.0).pvalue, "p_exact": _sign_flip(d)}
    for key, holm_key in (("p", "p_holm"), ("p_exact", "p_exact_holm")):
        for label, p in zip(out, holm([out[k][key] for k in out]), strict=True):
            out[label][holm_key] = p
    return out


def test_the_peak_fair_comparison_resolves_the_text_peak_and_its_controls():
    """compare_peak_fair: every strategy, the baseline included, tuned over train.lr and its own knob with
    grids of equal size; 10 evaluation seeds; the controls beside MixCSE and MoCHi; every evaluation cell
    selected an interior step except the one the section names and explains (its log starts at its resume);
    its section passes ``_check_section``; the contrasts it quotes are recomputed from the per-seed scores."""
    folder = ROOT / "results/compare_peak_fair"
    summary, section = _check_section(folder, "Sentences at their best")
    spec = summary["spec"]
    grids = spec["tune"]["grid"]
    assert set(grids) == {"none", "mixcse", "mixcse_lam0", "mochi", "hard_copies"} == set(spec["strategies"])
    assert all("train.lr" in g for g in grids.values())
    assert len({np.prod([len(v) for v in g.values()]) for g in grids.values()}) == 1
    assert spec["contrasts"] == {"mixcse": "mixcse_lam0", "mochi": "hard_copies"}
    lowest = min(grids["none"]["train.lr"])
    assert {r["best"]["train.lr"] for r in summary["tuning"]["text"].values()} == {lowest}
    text = summary["tasks"]["text"]
    assert all(len(v["seeds"]) == 10 for v in text["strategies"].values())
    edges = [c for c in summary["cell_records"] if c["best_step"] in (c["evaluations"][0]["step"],
                                                                     c["evaluations"][-1]["step"])]
    [edge] = edges
    assert (edge["strategy"], edge["seed"]) == ("mixcse_lam0", 10) and edge["evaluations"][0]["step"] > 8
    interior = sorted({c["best_step"] for c in summary["cell_records"] if c is not edge})
    assert (f"{len(summary['cell_records']) - 1} of the {len(summary['cell_records'])} evaluation cells "
            f"selected an interior step ({interior[0]} to {interior[-1]})") in section
    assert f"was resumed at step {edge['evaluations'][0]['step']}" in section
    scores = [e["stsb_dev"] for e in edge["evaluations"]]
    assert scores[0] == max(scores) and scores == sorted(scores, reverse=True)
    shown = {"mixcse": "MixCSE", "mochi": "MoCHi", "mixcse_lam0": "MixCSE at lam 0.02",
             "hard_copies": "`hard_copies`"}
    for label, x in _contrasts(summary, "text").items():
        c = text["contrasts"][label]
        assert c["mean"] == pytest.approx(x["mean"]) and c["p_holm"] == pytest.approx(x["p_holm"])
        assert c["p_exact_holm"] == pytest.approx(x["p_exact_holm"])
        strategy, control = label.split(" - ")
        assert (f"{shown[strategy]} - {shown[control]} {x['mean']:+.2f} [{x['lo']:.2f}, {x['hi']:.2f}] "
                f"(p_holm {_p(x['p_holm'])}, exact {_p(x['p_exact_holm'])})") in section, label
    # docs/strategies.md: each strategy's score and its verdict, MixCSE's and MoCHi's against their
    # controls, and the learning rate and own knob tuning chose
    strategies_md = " ".join((ROOT / "docs/strategies.md").read_text().split())
    for s, x in _paired(summary, "text").items():
        v = text["strategies"][s]
        assert quote(x) in strategies_md, s
        if s != "mixcse_lam0":  # quoted as MixCSE's control, its score not given
            assert f"{v['mean']:.2f} ± {v['std']:.2f}" in strategies_md, s
    base = text["strategies"]["none"]
    assert f"SimCSE's {base['mean']:.2f} ± {base['std']:.2f}" in strategies_md
    for label, x in _contrasts(summary, "text").items():
        strategy, control = label.split(" - ")
        assert (f"{shown[strategy]} - {shown[control]} {x['mean']:+.2f} [{x['lo']:.2f}, {x['hi']:.2f}] "
                f"(p_holm {_p(x['p_holm'])}, exact {_p(x['p_exact_holm'])})") in strategies_md, label
    for s in ("mixcse", "mochi"):
        best = summary["tuning"]["text"][s]["best"]
        assert f"tuned on STS-B dev: {', '.join(_knob_value(v) for v in best.values())})" in strategies_md, s
    # the README's headline: both strategies against SimCSE, the controls, what mixing adds
    readme = " ".join((ROOT / "README.md").read_text().split())
    paired = _paired(summary, "text")
    for s in ("mixcse", "mochi"):
        assert short_quote(paired[s]) in readme, s
    lam0, copies = paired["mixcse_lam0"]["mean"], paired["hard_copies"]["mean"]
    assert f"(MixCSE at lam 0.02 {lam0:+.2f}, `hard_copies` {copies:+.2f} over SimCSE)" in readme
    (a, b) = _contrasts(summary, "text").values()
    assert (f"mixing adds {a['mean']:+.2f} and {b['mean']:+.2f} (exact p_holm {_p(a['p_exact_holm'])} "
            "each)") in readme and _p(a["p_exact_holm"]) == _p(b["p_exact_holm"])


# ------------------------------------------------------------------ the papers and us
PAPERS_FROM = {"text": "peak_fair", "vision": "premise"}  # the comparison each modality's numbers come from
HARDMIX = re.compile(r"^`(?P<s>\w+)`: (?P<score>\w+) (?P<mean>\d+\.\d\d) ± (?P<std>\d+\.\d\d)"
                     r"(?:, (?P<verdict>better than|worse than|n\.s\. against) `(?P<base>\w+)`"
                     r"(?P<ttest> \(t-test only\))?)? \(`compare_(?P<cmp>\w+)`[;)]")
KNOB = {"train.lr": "lr", "loss.temperature": "temperature", "mixcse.lam": "lam", "mochi.n_hard": "N"}


def _leaves(tree: object) -> list:
    """Every scalar of a nested config."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, list):
        return [x for v in tree for x in _leaves(v)]
    return [tree]


def _knob_value(v: float) -> str:
    return f"{v:g}".replace("e-0", "e-")


def test_the_papers_table_quotes_the_surviving_comparisons():
    """docs/results.md's "The papers and us": every hardmix number is a strategy's mean ± std over the seeds
    of compare_peak_fair (sentences) or compare_premise (images), as their per-seed scores give it; its
    verdict words are the paired test's against the baseline, recomputed (Holm over the task's family, both
    tests); the seeds and the tuned values named beside it are the summary's; and a row whose strategy no
    surviving comparison ran says so."""
    flat = (ROOT / "docs/results.md").read_text(encoding="utf-8").split("## The papers and us")[1]
    (table,) = parse_tables(flat.split("\n## ")[0])
    surviving = {name: _summary_of(name) for name in COMMITTED}
    ran = {s for summary in surviving.values() for t in summary["tasks"].values() for s in t["strategies"]}
    quoted = set()
    for row in table["rows"]:
        number, what = row["hardmix's number"], row["what hardmix ran"]
        if number == "-":
            unrun = re.fullmatch(r"`(\w+)`: run by no surviving comparison", what)
            assert what == "nothing" or (unrun and unrun[1] not in ran), what
            continue
        m = HARDMIX.match(number)
        assert m, number
        summary = surviving[m["cmp"]]
        (task,) = [k for k, t in summary["tasks"].items() if t["score"] == m["score"]]
        assert PAPERS_FROM[task] == m["cmp"], number
        seeds = np.array(list(summary["tasks"][task]["strategies"][m["s"]]["seeds"].values()), dtype=float)
        assert (m["mean"], m["std"]) == (f"{seeds.mean():.2f}", f"{seeds.std(ddof=1):.2f}"), number
        assert f"{seeds.size} seeds" in what and what.startswith(f"`{m['s']}`"), what
        best = summary["tuning"][task][m["s"]]["best"]
        for knob, value in best.items():
            assert f"{KNOB[knob]} tuned ({_knob_value(value)})" in what, (what, knob)
        # every other number of what it ran is a setting of the strategy's cells (its first seed's config;
        # the in-batch negatives: the batch less the anchor's positive)
        config = yaml.safe_load((ROOT / f"results/compare_{m['cmp']}/runs/{task}/{m['s']}/seed1/config.yaml")
                                .read_text())
        settings = {str(v) for v in _leaves(config) if isinstance(v, int | float) and not isinstance(v, bool)}
        settings |= {d for v in _leaves(config) if isinstance(v, str) for d in re.findall(r"\d+", v)}
        settings |= {str(config["train"]["batch_size"] - 1), str(seeds.size)}
        settings |= {_knob_value(v) for v in best.values()}
        named = {n.replace(",", "") for n in re.findall(r"(?<![A-Za-z_])\d[\d,]*(?:\.\d+)?(?:e-\d+)?", what)}
        assert named <= settings, (what, named - settings)
        base = summary["baseline"]
        if m["s"] == base:
            assert m["verdict"] is None, number
        else:
            x = _paired(summary, task)[m["s"]]
            word = "n.s. against"
            if x["p_holm"] < 0.05:
                word = "better than" if x["mean"] > 0 else "worse than"
            ttest = word != "n.s. against" and x["p_exact_holm"] >= 0.05
            assert (m["verdict"], m["base"], bool(m["ttest"])) == (word, base, ttest), number
        quoted.add((m["cmp"], m["s"]))
    # both modalities' baselines and the papers' two strategies where each was run
    assert {("peak_fair", "none"), ("peak_fair", "mixcse"), ("peak_fair", "mochi"), ("premise", "none"),
            ("premise", "mochi")} <= quoted


# ------------------------------------------------------------------ bf16 against fp32: precision.yaml
PRECISION = ROOT / "results/compare_precision"


def test_the_precision_comparison_decides_auto_and_the_docs_quote_it(monkeypatch):
    """compare_precision: fp32 and bf16 arms, 5 seeds a task, every cell in its arm's precision; its section
    passes ``_check_section``; ``train.precision: auto`` picks bf16 for a task on a native-bf16 CPU exactly
    when the 95% interval of its bf16 - fp32 lies inside +-1 point, and the section says which."""
    import torch

    from hardmix.training import runtime
    from hardmix.training.api import resolve_task
    from hardmix.training.runtime import choose_precision

    summary, section = _check_section(PRECISION, "bf16 against fp32")
    assert summary["cells"] == 20 and summary["baseline"] == "fp32"
    for task in ("text", "vision"):
        for arm in ("fp32", "bf16"):
            cells = _seed_cells(PRECISION, task, arm)
            assert len(cells) == 5
            assert {json.loads((c / "results.json").read_text())["precision"] for c in cells} == {arm}
    inside = {}
    for task in summary["tasks"]:
        x = _paired(summary, task)["bf16"]
        inside[task] = -1.0 < x["lo"] and x["hi"] < 1.0
        verdict = "inside" if inside[task] else "not inside"
        assert f"{task}: {quote(x)}: the interval lies {verdict} ±1 point" in section, task
        readme = " ".join((ROOT / "README.md").read_text().split())
        assert f"moves by {x['mean']:+.2f} [{x['lo']:.2f}, {x['hi']:.2f}], " + (
            "inside ±1 point" if inside[task] else "which 5 seeds cannot bound to a point") in readme, task
    # the text claims: the same selected step in every seed, the scores equal but one seed's 0.01, and
    # the fp32 arm's scores are the retired compare_cpu_full's SimCSE cells', seed for seed
    text = {arm: [json.loads((c / "results.json").read_text()) for c in _seed_cells(PRECISION, "text", arm)]
            for arm in ("fp32", "bf16")}
    assert {r["best_step"] for rs in text.values() for r in rs} == {20}
    gaps = [round(b["final_scores"]["sts_avg"] - a["final_scores"]["sts_avg"], 2)
            for a, b in zip(text["fp32"], text["bf16"], strict=True)]
    assert sorted(map(abs, gaps)) == [0.0, 0.0, 0.0, 0.0, 0.01]
    fp32 = summary["tasks"]["text"]["strategies"]["fp32"]["seeds"]
    cpu_full = json.loads((CPU_FULL / "summary.json").read_text())
    simcse = cpu_full["tasks"]["text"]["strategies"]["none"]["seeds"]
    assert fp32 == {seed: simcse[seed] for seed in fp32}
    monkeypatch.setattr(runtime, "cpu_bf16_flags", lambda: ("avx512_bf16",))
    # auto follows the verdict: bf16 for what was shown (both arms ran `none`), for that only
    arms = json.loads((PRECISION / "summary.json").read_text())["spec"]["strategies"]
    assert {e["name"] for entries in arms.values() for e in entries} == {"none"}
    for task, ok in inside.items():
        cls = resolve_task(task)
        assert cls.bf16_shown_for == (("none",) if ok else ()), task
        for strategies, shown in (([NoMixing()], ok), ([NoMixing(), MixCSE()], False), ([MixCSE()], False)):
            cfg = SimpleNamespace(loss=SimpleNamespace(strategies=strategies))
            chosen = choose_precision("auto", torch.device("cpu"), task=task,
                                      auto_bf16=cls.about(cfg).auto_bf16())[0]
            assert chosen == ("bf16" if shown else "fp32"), (task, strategies)


def test_the_precision_comparisons_vision_cells_learned_as_its_readme_says():
    """Every vision cell of compare_precision: a falling loss, a final proxy accuracy above 0.5, the test
    k-NN against the untrained network of the same seed and precision; the README quotes the ranges."""
    from tests.run_records import learning

    firsts, lasts, proxies, gains = [], [], [], {}
    for arm in ("fp32", "bf16"):
        for cell in _seed_cells(PRECISION, "vision", arm):
            first, last, proxy = learning(cell)
            record = json.loads((cell / "results.json").read_text())
            assert last < first - 2 and proxy > 0.5, cell
            firsts.append(first)
            lasts.append(last)
            proxies.append(proxy)
            gains.setdefault(arm, []).append(record["final_scores"]["knn_top1"]
                                             - record["start_scores"]["knn_top1"])
    text = " ".join((PRECISION / "README.md").read_text().split())
    assert (f"from {min(firsts):.2f}-{max(firsts):.2f} to {min(lasts):.2f}-{max(lasts):.2f}" in text
            and f"proxy accuracy is {min(proxies):.2f} to {max(proxies):.2f}" in text)
    for arm, g in gains.items():
        assert f"by {min(g):+.1f} to {max(g):+.1f} in the {arm} arm" in text, arm
    assert min(gains["fp32"]) >= 10 and sorted(gains["bf16"])[1] >= 10  # one bf16 seed under 10, said
    assert "one bf16 cell, seed 1, stays under the 10 points" in text and gains["bf16"][0] < 10


@pytest.mark.parametrize("name", COMMITTED)
def test_report_only_rewrites_each_committed_summary_exactly(name, tmp_path, data_root, capsys):
    """Today's code, given a committed comparison's cells and its spec copy, writes the committed
    ``summary.json`` again, value for value: a change of hardmix that moves a number of a committed
    comparison fails here. Only the writer's own provenance differs: ``machine`` and ``versions`` say
    where and with what the summary was written (here: this machine), not what its cells measured (each
    cell's ``results.json`` keeps that)."""
    import shutil

    from hardmix.cli import main as cli
    from hardmix.training.results import versions
    from hardmix.utils.machine import host

    folder = tmp_path / name
    shutil.copytree(ROOT / f"results/compare_{name}", folder)
    committed = json.loads((folder / "summary.json").read_text())
    spec = folder / "spec.yaml"  # the comparison's own copy (its shipped spec may have grown since)
    assert cli(["compare", str(spec), "--output", str(folder), "--report-only"]) == 0, capsys.readouterr().err
    written = json.loads((folder / "summary.json").read_text())
    provenance = ("machine", "versions")
    assert {k: written[k] for k in provenance} == {"machine": host(), "versions": versions()}
    # the start: measured by the cells where their records hold it, else by --measure-start into the
    # comparison's start/ folder (each file: one seed's untrained network, or text's pretrained model),
    # else "start not measured", never learned
    for name_, t in written["tasks"].items():
        _check_start(folder, name_, t, written)
    # which code trained each cell: as the records say (a cell of an older hardmix records none)
    code = {}
    for c in written["cell_records"]:
        rec = _cell_record(folder, c).get("code") or {}
        dirty = "+dirty" if rec.get("dirty") else ""
        label = rec["commit"][:12] + dirty if rec.get("commit") else "not recorded"
        code[label] = code.get(label, 0) + 1
    assert written["code"]["counts"] == code and sum(code.values()) == written["finished"]
    assert {k: v for k, v in written.items() if k not in provenance} == \
        {k: v for k, v in committed.items() if k not in provenance}


def _cell_record(folder: Path, cell: dict) -> dict:
    """A cell's ``results.json`` in the comparison folder."""
    return json.loads((folder / "runs" / cell["task"] / cell["strategy"] / f"seed{cell['seed']}" /
                       "results.json").read_text())


def _check_start(folder: Path, task: str, t: dict, summary: dict) -> None:
    """A task's start row and learned entries, recomputed from the cells' own starts (``start_scores``,
    measured before their first step) or, for older cells, from the start files of ``--measure-start``."""
    cells = [c for c in summary["cell_records"] if c["task"] == task]
    label_of = {id(c): f"{task}/{c['strategy']}/seed{c['seed']}" for c in cells}
    start_of = measured_starts(folder, task, t["score"])  # a cell's label -> its start score
    if start_of:
        assert t["start"]["source"].startswith("measured after the fact by --measure-start on ")
    else:
        start_of = {label_of[id(c)]: record["start_scores"][t["score"]] for c in cells
                    if "start_scores" in (record := _cell_record(folder, c))}
    if not start_of:
        assert t["start"]["status"] == "start not measured" and t["start"]["mean"] is None
        assert {lr["verdict"] for lr in t["learned"].values()} == {None}
        assert {lr["status"] for lr in t["learned"].values()} == {"start not measured"}
        return
    assert t["start"]["status"] == "measured"
    starts: dict[str, float] = {}  # the baseline's cells' start first, per seed
    for c in sorted(cells, key=lambda c: c["strategy"] != summary["baseline"]):
        if label_of[id(c)] in start_of:
            starts.setdefault(str(c["seed"]), start_of[label_of[id(c)]])
    assert t["start"]["seeds"] == starts
    assert t["start"]["mean"] == pytest.approx(np.mean(list(starts.values())))
    for strategy, lr in t["learned"].items():
        d = np.array([c["final_scores"][t["score"]] - start_of[label_of[id(c)]] for c in cells
                      if c["strategy"] == strategy and label_of[id(c)] in start_of])
        assert lr["n"] == d.size and lr["mean"] == pytest.approx(d.mean())
        if d.size > 1 and np.ptp(d) > 0:
            lo, _ = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=stats.sem(d))
            assert lr["ci_low"] == pytest.approx(lo) and lr["verdict"] is bool(lo > 0)


# ------------------------------------------------------------------ the reference's form
def test_the_docs_read_as_a_reference():
    """docs/results.md says what is true now, as a reference of about 400 lines (the length a reviewer
    asked for): no "History" section; no withdrawn verdict in the README or docs/; and no doc names a
    commit of this repository (git keeps them; other repositories' commits, cited as sources, stay) in its
    own words: a quoted comparison block is the tool's Markdown, checked equal to it above, whose note of the
    code that trained mixed cells names commits as the records do."""
    paths = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
    docs = {p: p.read_text(encoding="utf-8") for p in paths}
    results = docs[ROOT / "docs/results.md"]
    assert not re.search(r"^#+ .*history", results, re.M | re.I)
    assert len(results.splitlines()) <= 410
    assert not [p.name for p, text in docs.items() if "withdrawn" in text.lower()]
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no commits to look for")
    ours = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--all"], capture_output=True, text=True,
                          check=True).stdout.split()
    assert len(ours) > 1
    prose = {p: BLOCK.sub("", text) for p, text in docs.items()}
    words = {(p.name, w) for p, text in prose.items() for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)}
    named = [(name, w) for name, w in words if any(c.startswith(w) for c in ours)]
    assert not named, named


LEARNED = re.compile(r"`(?P<cmp>compare_\w+)` (?P<task>text|vision): (?:`(?P<base>\w+)` (?P<d>[+-]\d+\.\d\d) "
                     r"\[(?P<lo>-?\d+\.\d\d), (?P<hi>-?\d+\.\d\d)\] (?P<score>\w+) over its start "
                     r"(?P<start>-?\d+\.\d\d)(?: \(mean-pooled (?P<pooled>\d+\.\d\d)\))?, "
                     r"(?P<said>learned|did not learn)|start not measured)")


@pytest.mark.parametrize("doc", ["README.md", "docs/results.md"])
def test_the_docs_say_for_every_verdict_whether_its_baseline_learned(doc):
    """The README and docs/results.md name, for every task of every committed comparison, its baseline's
    difference from its start with the 95% interval and whether it learned (or that its start was not
    measured), as the committed summary.json has it (recomputed from its cells and start files by
    test_report_only_rewrites_each_committed_summary_exactly)."""
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())  # lines wrapped anywhere
    said = {(m["cmp"], m["task"]): m for m in LEARNED.finditer(text)}
    for name in COMMITTED:
        summary = json.loads((ROOT / f"results/compare_{name}/summary.json").read_text())
        base = summary["baseline"]
        for task, t in summary["tasks"].items():
            m = said.get((f"compare_{name}", task))
            assert m is not None, f"{doc} does not say whether compare_{name}'s {task} baseline learned"
            lr = t["learned"][base]
            if lr["verdict"] is None:
                assert m["d"] is None and t["start"]["status"] == "start not measured", (name, task)
                continue
            assert m["base"] == base and m["score"] == t["score"], (name, task)
            assert (m["d"], m["lo"], m["hi"]) == (f"{lr['mean']:+.2f}", f"{lr['ci_low']:.2f}",
                                                  f"{lr['ci_high']:.2f}"), (name, task)
            assert m["start"] == f"{t['start']['mean']:.2f}", (name, task)
            pooled = (t["start"].get("other") or {}).get("mean pooling")
            assert m["pooled"] is None or m["pooled"] == f"{pooled['mean']:.2f}", (name, task)
            if m["pooled"] is not None:  # "ends near or below the same untrained model mean-pooled"
                assert t["strategies"][base]["mean"] < pooled["mean"] + 0.5, (name, task)
            assert m["said"] == ("learned" if lr["verdict"] else "did not learn"), (name, task)
