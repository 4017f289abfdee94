"""``results/reproducibility_2026-12-03``: every figure of its README's tables is its runs' own
records, and each statement it (and ``docs/results.md``) makes is checked on them: bit-for-bit repeats with
the same kernels and threads, other kernels or threads giving other floats, and the 2026-12-02
quickstart's vision rows reproduced by AVX2 kernels."""

from __future__ import annotations

import json
from pathlib import Path

from tests.compare.markdown_tables import parse_tables

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "results/reproducibility_2026-12-03"


def _lines(run: str) -> list[dict]:
    return [json.loads(x) for x in (FOLDER / run / "metrics.jsonl").read_text().splitlines()]


def _losses(run: str) -> list[float]:
    return [r["loss"] for r in _lines(run) if "loss" in r]


def _scores(run: str, key: str) -> list[float]:
    return [r[key] for r in _lines(run) if key in r]


def _final(run: str, key: str) -> float:
    return json.loads((FOLDER / run / "results.json").read_text())["final_scores"][key]


def test_the_tables_are_the_runs_records():
    vision, text = parse_tables((FOLDER / "README.md").read_text())
    assert len(vision["rows"]) == 7 and len(text["rows"]) == 3
    for row in vision["rows"]:
        for run in row["run"].replace("`", "").split(", "):
            assert row["vision: first loss"] == f"{_losses(run)[0]:.8f}", run
            assert row["vision: val k-NN top-1"] == f"{_scores(run, 'val_knn_top1')[-1]:.2f}", run
            assert row["vision: k-NN top-1"] == f"{_final(run, 'knn_top1'):.2f}", run
    for row in text["rows"]:
        run = row["run"].strip("`")
        assert row["text: first loss"] == f"{_losses(run)[0]:.8f}", run
        assert row["text: STS-B dev at steps 10, 20, 30"] == ", ".join(
            f"{v:.2f}" for v in _scores(run, "stsb_dev")), run
        assert row["text: STS-B test"] == f"{_final(run, 'STS-B'):.2f}", run


def test_the_same_kernels_and_threads_repeat_bit_for_bit_and_others_do_not():
    for a, b in (("a1", "a2"), ("a1", "avx512core"), ("avx2", "avx2b"), ("a1", "old63")):
        assert _losses(a) == _losses(b) and _scores(a, "val_knn_top1") == _scores(b, "val_knn_top1"), (a, b)
        assert _final(a, "knn_top1") == _final(b, "knn_top1"), (a, b)
    for other in ("t2", "avx2", "v_avx2all"):
        assert _losses(other)[0] != _losses("a1")[0], other
    for other in ("t_t2", "t_avx2all"):
        assert _losses(other)[0] != _losses("t_a1")[0] and _final(other, "STS-B") == _final("t_a1", "STS-B")
    # the text's dev score at step 10 moves by less than a thousandth with every kernel limited to AVX2
    assert 0 < abs(_scores("t_avx2all", "stsb_dev")[0] - _scores("t_a1", "stsb_dev")[0]) < 1e-3


def test_avx2_kernels_give_the_2026_12_02_quickstart_s_vision_rows_bit_for_bit():
    mine = json.loads((FOLDER / "quickstart_vision_avx2/summary.json").read_text())["tasks"]["vision"]
    then = json.loads((ROOT / "results/quickstart_2026-12-02/summary.json").read_text())
    then = then["tasks"]["vision"]
    assert {s: v["seeds"] for s, v in mine["strategies"].items()} == {
        s: v["seeds"] for s, v in then["strategies"].items()}
    assert [round(mine["paired"][s]["mean"], 2) for s in ("mixcse", "mochi")] == [0.40, 2.00]
    for cell in (FOLDER / "quickstart_vision_avx2/runs").glob("vision/*/seed*/results.json"):
        assert json.loads(cell.read_text())["machine"]["cpu_kernels"] == "AVX2", cell
    # and with this machine's own kernels the quickstart gives the rows the README prints now
    now = json.loads((ROOT / "results/quickstart_2026-12-03/summary.json").read_text())
    paired = now["tasks"]["vision"]["paired"]
    assert [round(paired[s]["mean"], 2) for s in ("mixcse", "mochi")] == [-3.7, -1.3]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "the vision rows of 2026-12-02 (mixcse +0.40, mochi +2.00) are reproduced bit for bit" in readme
