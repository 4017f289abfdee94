"""The text task's held-out scores: STS-B dev selects, the STS suite is reported with bootstrap standard
errors, checked against a plain loop over scipy's Spearman on the same resamples."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy.stats import spearmanr

from hardmix.config.loader import ConfigError
from hardmix.text.config import build_text_config
from hardmix.text.evaluation import STS_TASKS, evaluate_sts
from hardmix.text.sts import aggregate, bootstrap_se
from hardmix.text.task import TextTask
from hardmix.training import run_training


def _naive_se(per_task, how: str, resamples: int, seed: int) -> dict[str, float]:
    """The bootstrap one replicate at a time with scipy.stats.spearmanr (the same generator draws, in the
    same order: per task, per subset, all replicates at once)."""
    rng = np.random.default_rng(seed)
    reps = {}
    for task, subsets in per_task.items():
        idx = {name: rng.integers(0, len(g), size=(resamples, len(g))) for name, (_, g) in subsets.items()}
        rows = []
        for r in range(resamples):
            drawn = {name: (np.asarray(s)[idx[name][r]], np.asarray(g)[idx[name][r]])
                     for name, (s, g) in subsets.items()}
            if how == "all":
                rho = spearmanr(np.concatenate([s for s, _ in drawn.values()]),
                                np.concatenate([g for _, g in drawn.values()])).statistic
            else:
                rho = aggregate(drawn, how)
            rows.append(100 * rho)
        reps[task] = np.array(rows)
    out = {task: float(np.std(r, ddof=1)) for task, r in reps.items()}
    out["avg"] = float(np.std(np.mean(list(reps.values()), axis=0), ddof=1))
    return out


@pytest.mark.parametrize("how", ["all", "mean", "wmean"])
def test_bootstrap_se_equals_a_plain_loop(how):
    rng = np.random.default_rng(4)
    per_task = {}
    for task, sizes in (("A", (40, 25)), ("B", (60,)), ("C", (15, 30, 22))):
        subsets = {}
        for i, n in enumerate(sizes):
            gold = np.round(rng.uniform(0, 5, n), 1)  # ties, as the real gold scores
            subsets[f"s{i}"] = (gold + rng.normal(0, 1.5, n), gold)
        per_task[task] = subsets
    got = bootstrap_se(per_task, how, resamples=100, seed=3, chunk=100)
    want = _naive_se(per_task, how, 100, 3)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9)
    # Seeded: the same errors again; another seed, other resamples.
    assert bootstrap_se(per_task, how, resamples=100, seed=3, chunk=100) == got
    assert bootstrap_se(per_task, how, resamples=100, seed=4, chunk=100) != got


def test_bootstrap_se_is_the_sampling_error_of_spearman():
    """On independent draws of a bivariate normal, the bootstrap SE matches the spread of the estimate
    over fresh samples (within 20%)."""
    rng = np.random.default_rng(0)
    n, cov = 500, [[1.0, 0.6], [0.6, 1.0]]
    fresh = [100 * spearmanr(*rng.multivariate_normal([0, 0], cov, n).T).statistic for _ in range(300)]
    x, y = rng.multivariate_normal([0, 0], cov, n).T
    se = bootstrap_se({"T": {"t": (x, y)}}, resamples=1000)["T"]
    assert se == pytest.approx(np.std(fresh, ddof=1), rel=0.2)


def test_task_contract(tiny_text_config):
    cfg = build_text_config(copy.deepcopy(tiny_text_config))
    assert TextTask.selection_metric == "stsb_dev" and TextTask.default_score == "sts_avg"
    held = TextTask.about(cfg).held_out_scores()
    assert held == ["sts_avg", *STS_TASKS] and "stsb_dev" not in held
    assert TextTask.about(cfg).score_names() == []  # no evaluation at all in the tiny config
    assert TextTask.about(cfg).overrides_for_scores(["sts_avg", "STS-B"]) == ["eval.final_sts=true"]
    assert TextTask.about(cfg).overrides_for_scores(["stsb_dev"]) == []
    on = build_text_config(copy.deepcopy(tiny_text_config), ["eval.final_sts=true", "eval.eval_steps=5"])
    assert TextTask.about(on).overrides_for_scores(["sts_avg_se"]) == []
    assert TextTask.about(on).score_names() == ["stsb_dev", *held]
    with pytest.raises(ConfigError, match="eval.sts_bootstrap"):
        build_text_config(copy.deepcopy(tiny_text_config), ["eval.sts_bootstrap=1"])
    # A subset of the suite: its tasks only, no average; all seven named is the whole suite.
    part = build_text_config(copy.deepcopy(tiny_text_config), ["eval.sts_tasks=[SICK-R, STS-B]"])
    assert TextTask.about(part).held_out_scores() == ["STS-B", "SICK-R"]
    every = build_text_config(copy.deepcopy(tiny_text_config), [f"eval.sts_tasks=[{', '.join(STS_TASKS)}]"])
    assert TextTask.about(every).held_out_scores() == held
    for bad in ("[STS17]", "[]", "[STS-B, STS-B]"):
        with pytest.raises(ConfigError, match="eval.sts_tasks"):
            build_text_config(copy.deepcopy(tiny_text_config), [f"eval.sts_tasks={bad}"])


def test_a_run_reports_the_sts_suite_with_its_errors(tmp_path, tiny_text_config, data_root, one_torch_thread):
    from hardmix.text.encoder import SentenceEncoder

    cfg = build_text_config(copy.deepcopy(tiny_text_config),
                            ["train.max_steps=4", "eval.eval_steps=2", "eval.final_sts=true",
                             "eval.sts_bootstrap=50"])
    record = run_training(TextTask, cfg, tmp_path / "run")
    final = record["final_scores"]
    assert record["selection_metric"] == "stsb_dev" and final["stsb_dev"] == record["best_score"]
    # The selected model's STS suite, recomputed from its export.
    details: dict = {}
    encoder = SentenceEncoder(tmp_path / "run" / "best", batch_size=cfg.eval.batch_size)
    sts = evaluate_sts(encoder, show_progress=False, details=details)
    assert final["sts_avg"] == sts["avg"] and all(final[t] == sts[t] for t in STS_TASKS)
    want = _naive_se(details["pairs"], "all", 50, 0)
    assert final["sts_avg_se"] == pytest.approx(want["avg"], rel=1e-9)
    for t in STS_TASKS:
        assert final[f"{t}_se"] == pytest.approx(want[t], rel=1e-9) and final[f"{t}_se"] > 0


def test_a_run_on_part_of_the_suite_reports_those_tasks(tmp_path, tiny_text_config, data_root,
                                                         one_torch_thread):
    from hardmix.text.encoder import SentenceEncoder

    cfg = build_text_config(copy.deepcopy(tiny_text_config),
                            ["train.max_steps=2", "eval.final_sts=true", "eval.sts_tasks=[STS-B]",
                             "eval.sts_bootstrap=50"])
    final = run_training(TextTask, cfg, tmp_path / "run")["final_scores"]
    assert sorted(final) == ["STS-B", "STS-B_se"]
    details: dict = {}
    encoder = SentenceEncoder(tmp_path / "run" / "best", batch_size=cfg.eval.batch_size)
    sts = evaluate_sts(encoder, tasks=["STS-B"], show_progress=False, details=details)
    assert final["STS-B"] == sts["STS-B"]
    assert final["STS-B_se"] == pytest.approx(_naive_se(details["pairs"], "all", 50, 0)["STS-B"], rel=1e-9)
