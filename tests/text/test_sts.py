"""STS scoring against independent scipy computations on the same embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from hardmix.text import evaluation as ev
from hardmix.text import senteval_data as sd
from hardmix.text.sts import aggregate, cosine_scores


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    out = [x @ y / np.sqrt((x @ x) * (y @ y)) if (x @ x) * (y @ y) > 0 else 0.0 for x, y in zip(a, b)]
    return np.array(out)


def test_cosine_scores_and_nan_handling():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    np.testing.assert_allclose(cosine_scores(a, b), _cos(a, b), rtol=1e-12)
    a[0] = 0.0  # zero vector -> NaN cosine -> 0, as SentEval's nan_to_num
    b[1, 3] = np.nan
    out = cosine_scores(a, b)
    assert out[0] == 0.0 and np.isfinite(out).all()


def test_aggregations_against_scipy():
    rng = np.random.default_rng(1)
    per = {}
    for name, n in (("a", 30), ("b", 80), ("c", 45)):
        g = rng.uniform(0, 5, n)
        per[name] = (g + rng.normal(0, 1 + len(name) + n / 40, n), np.round(g, 1))  # ties in gold
    sys_all = np.concatenate([s for s, _ in per.values()])
    gold_all = np.concatenate([g for _, g in per.values()])
    rhos = [spearmanr(s, g).statistic for s, g in per.values()]
    ns = [len(g) for _, g in per.values()]
    assert aggregate(per, "all") == pytest.approx(spearmanr(sys_all, gold_all).statistic, abs=1e-12)
    assert aggregate(per, "mean") == pytest.approx(np.mean(rhos), abs=1e-12)
    assert aggregate(per, "wmean") == pytest.approx(np.dot(rhos, ns) / sum(ns), abs=1e-12)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(per, "median")


# ------------------------------------------------------------------------------ real data, same embeddings
def _raw_sts_year(folder: Path, subsets) -> dict[str, tuple[list[str], list[str], list[float]]]:
    """An independent minimal reader of STS12-16 (drop pairs with an empty gold line)."""
    out = {}
    for name in subsets:
        pairs = (folder / f"STS.input.{name}.txt").read_text(encoding="utf-8").splitlines()
        gold = (folder / f"STS.gs.{name}.txt").read_text(encoding="utf-8").splitlines()
        keep = [(p.split("\t"), float(g)) for p, g in zip(pairs, gold) if g.strip()]
        out[name] = ([" ".join(p[0].split()) for p, _ in keep], [" ".join(p[1].split()) for p, _ in keep],
                     [g for _, g in keep])
    return out


def _raw_tsv(path: Path, skip: int, cols: tuple[int, int, int]) -> tuple[list[str], list[str], list[float]]:
    rows = [line.strip().split("\t") for line in path.read_text(encoding="utf-8").splitlines()[skip:]]
    i, j, k = cols
    first = [" ".join(r[i].split()) for r in rows]
    return first, [" ".join(r[j].split()) for r in rows], [float(r[k]) for r in rows]


@pytest.mark.data
@pytest.mark.parametrize("how", ["all", "mean", "wmean"])
def test_every_sts_task_equals_scipy(senteval_root, bow_encoder, how):
    scores = ev.evaluate_sts(bow_encoder, aggregation=how, root=senteval_root, show_progress=False)
    assert list(scores) == [*ev.STS_TASKS, "avg"]
    expected = {}
    for task, subsets in sd.STS_SUBSETS.items():
        raw = _raw_sts_year(senteval_root / "STS" / f"{task}-en-test", subsets)
        sys_ = {n: _cos(bow_encoder(a), bow_encoder(b)) for n, (a, b, _) in raw.items()}
        gold = {n: np.array(g) for n, (_, _, g) in raw.items()}
        if how == "all":
            cat = np.concatenate
            rho = spearmanr(cat(list(sys_.values())), cat(list(gold.values()))).statistic
        else:
            rhos = [spearmanr(sys_[n], gold[n]).statistic for n in raw]
            rho = np.average(rhos, weights=[len(gold[n]) for n in raw] if how == "wmean" else None)
        expected[task] = round(100 * rho, 2)
    for task, path, skip, cols in (("STS-B", "STS/STSBenchmark/sts-test.csv", 0, (5, 6, 4)),
                                   ("SICK-R", "SICK/SICK_test_annotated.txt", 1, (1, 2, 3))):
        a, b, g = _raw_tsv(senteval_root / path, skip, cols)
        expected[task] = round(100 * spearmanr(_cos(bow_encoder(a), bow_encoder(b)), g).statistic, 2)
    for task in ev.STS_TASKS:
        assert scores[task] == pytest.approx(expected[task], abs=1e-9), task
    assert scores["avg"] == round(np.mean([expected[t] for t in ev.STS_TASKS]), 2)


@pytest.mark.data
def test_stsb_dev_score_equals_scipy(senteval_root, bow_encoder):
    calls = []

    def encode(sentences):
        calls.append(len(sentences))
        return bow_encoder(sentences)

    score = ev.stsb_dev_score(encode, root=senteval_root)
    a, b, g = _raw_tsv(senteval_root / "STS/STSBenchmark/sts-dev.csv", 0, (5, 6, 4))
    expected = 100 * spearmanr(_cos(bow_encoder(a), bow_encoder(b)), g).statistic
    assert score == pytest.approx(expected, abs=1e-9)
    assert len(calls) == 1 and calls[0] == len(set(a + b))  # every distinct sentence once, one call
    assert ev.stsb_dev_score(encode, root=senteval_root) == score  # the cached dev set gives the same score


@pytest.mark.data
def test_stsb_dev_with_a_real_encoder(senteval_root, tiny_bert_dir, one_torch_thread):
    from hardmix.text.encoder import SentenceEncoder

    enc = SentenceEncoder(tiny_bert_dir, pooling="avg", device="cpu")
    score = ev.stsb_dev_score(enc, root=senteval_root)
    d = sd.load_stsb("dev", senteval_root)
    expected = 100 * spearmanr(_cos(enc.encode(d.sent1), enc.encode(d.sent2)), d.labels).statistic
    assert score == pytest.approx(expected, abs=1e-9)
    assert -100 <= score <= 100


@pytest.mark.data
def test_cli_prints_tables_and_writes_json(senteval_root, tiny_bert_dir, tmp_path, capsys, monkeypatch,
                                           one_torch_thread):
    import json

    from hardmix.cli import main

    monkeypatch.setenv("HARDMIX_DATA", str(senteval_root.parent))
    load = ev.load_sts_suite  # two tasks keep the test short: one year (aggregated) and one single set
    monkeypatch.setattr(ev, "load_sts_suite", lambda tasks, root=None: load(("STS16", "STS-B"), root))
    out = tmp_path / "scores.json"
    assert main(["eval", "text", str(tiny_bert_dir), "--tasks", "sts", "--pooling", "avg",
                 "--aggregation", "wmean", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| STS16 | STS-B |  Avg. |" in printed and "aggregation 'wmean'" in printed
    scores = json.loads(out.read_text())
    assert list(scores) == ["sts"] and list(scores["sts"]) == ["STS16", "STS-B", "avg"]
    values = [scores["sts"][t] for t in ("STS16", "STS-B")]
    assert all(round(v, 2) == v and -100 <= v <= 100 for v in values)
    assert scores["sts"]["avg"] == round(float(np.mean(values)), 2)

    assert main(["eval", "text", str(tiny_bert_dir), "--tasks", "sts,glue"]) == 2
    assert "unknown task group(s) ['glue']" in capsys.readouterr().err
