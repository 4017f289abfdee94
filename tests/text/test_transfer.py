"""Batched logistic regression and the SentEval protocols, against closed forms and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp

from hardmix.text import evaluation as ev
from hardmix.text.transfer import (
    SENTEVAL_L2,
    fit_logreg,
    inner_kfold_eval,
    kfold_eval,
    split_eval,
    stratified_kfold,
)


def _scipy_softmax_lr(X: np.ndarray, y: np.ndarray, C: int, lam: float) -> np.ndarray:
    """Independent reference: mean CE + lam/2 ||[W; b]||^2 over all C x (D + 1) parameters, float64 L-BFGS.
    Returns (D + 1, C)."""
    Xa = np.c_[X, np.ones(len(X))].astype(np.float64)
    Y = np.eye(C)[y]

    def f(w):
        Wm = w.reshape(Xa.shape[1], C)
        Z = Xa @ Wm
        P = np.exp(Z - logsumexp(Z, axis=1, keepdims=True))
        loss = (logsumexp(Z, axis=1) - (Z * Y).sum(1)).mean() + lam / 2 * w @ w
        return loss, (Xa.T @ (P - Y) / len(y)).ravel() + lam * w

    res = minimize(f, np.zeros(Xa.shape[1] * C), jac=True, method="L-BFGS-B",
                   options={"maxiter": 20000, "gtol": 1e-12, "ftol": 1e-16, "maxcor": 30})
    return res.x.reshape(Xa.shape[1], C)


def _noisy_blobs(n: int, d: int, C: int, seed: int, scale: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping, anisotropic, uncentred classes (like raw sentence embeddings)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    centers = rng.standard_normal((C, d))
    X = centers[y] + rng.standard_normal((n, d)) * np.linspace(0.1, 3, d) + scale
    return X.astype(np.float32), y


# ------------------------------------------------------------------------------------------ the solver
@pytest.mark.parametrize("C", [2, 4])
def test_fit_matches_scipy_optimum(C):
    X, y = _noisy_blobs(300, 6, C, seed=C)
    lams = [1e-3, 1e-1]
    masks = np.ones((2, len(y)), dtype=bool)
    masks[1, :50] = False  # second model: a subset of the samples
    fit = fit_logreg(X, y, masks, lams, C, device="cpu")
    assert fit.converged.all()
    Xa = np.c_[X, np.ones(len(X))].astype(np.float64)
    for m, lam in enumerate(lams):
        Xm, ym = Xa[masks[m]], y[masks[m]]
        ref = _scipy_softmax_lr(X[masks[m]], ym, C, lam)  # (D + 1, C)
        theta = fit.theta[:, m].numpy()
        if C == 2:  # one logit = the difference of the two softmax rows, which sum to zero at the optimum
            theta = np.c_[-theta / 2, theta / 2]

        def objective(W, Xm=Xm, ym=ym, lam=lam):
            Z = Xm @ W
            return (logsumexp(Z, axis=1) - Z[np.arange(len(ym)), ym]).mean() + lam / 2 * (W * W).sum()

        assert objective(theta) <= objective(ref) + 1e-11  # at least as good as scipy's float64 optimum
        np.testing.assert_allclose(theta, ref, atol=2e-5)  # flat directions: curvature >= lam only
        np.testing.assert_array_equal(fit.predict(X)[m], (Xa @ ref).argmax(1))


def test_separable_toy_set_reaches_closed_form_accuracy():
    """Two classes separated by a margin along a known direction: the closed-form rule sign(w . x - c)
    classifies every point; the cross-validated classifier must too (SentEval protocol, all penalties)."""
    rng = np.random.default_rng(0)
    n, d = 400, 5
    w = rng.standard_normal(d)
    w /= np.linalg.norm(w)
    X = rng.standard_normal((n, d)) * 2 + 3.0
    margin = X @ w - 3.0 * w.sum()
    keep = np.abs(margin) > 0.5  # a gap of 1.0 around the separating plane
    X, y = X[keep].astype(np.float32), (margin[keep] > 0).astype(np.int64)
    closed_form = float(((X @ w - 3.0 * w.sum() > 0) == y).mean()) * 100
    assert closed_form == 100.0
    out = inner_kfold_eval(X, y, k=5, seed=3, device="cpu")
    assert out["acc"] == closed_form and out["devacc"] == closed_form

    # 3 separable classes (nearest-center closed form) with the k-fold and the split protocols
    centers = np.array([[0.0, 0, 8], [8, 0, 8], [0, 8, 8]])
    lab = rng.integers(0, 3, 600)
    Z = (centers[lab] + rng.uniform(-1.5, 1.5, (600, 3))).astype(np.float32)
    nearest = np.argmin(((Z[:, None] - centers[None]) ** 2).sum(-1), axis=1)
    assert (nearest == lab).all()
    assert kfold_eval(Z[:400], lab[:400], Z[400:], lab[400:], k=5, device="cpu")["acc"] == 100.0
    split = split_eval(Z[:300], lab[:300], Z[300:400], lab[300:400], Z[400:], lab[400:], device="cpu")
    assert split["acc"] == 100.0


def test_stratified_kfold():
    y = np.array([0] * 53 + [1] * 31 + [2] * 16)
    f = stratified_kfold(y, 10, seed=7)
    sizes = np.bincount(f, minlength=10)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 100
    for c in range(3):
        per = np.bincount(f[y == c], minlength=10)
        assert per.max() - per.min() <= 1
    np.testing.assert_array_equal(f, stratified_kfold(y, 10, seed=7))
    assert not np.array_equal(f, stratified_kfold(y, 10, seed=8))


# ------------------------------------------------------------------------------- protocol bookkeeping
def _reference_inner_kfold(X, y, k, grid, seed):
    """SentEval's InnerKFoldClassifier written out plainly, one scipy fit at a time."""
    outer = stratified_kfold(y, k, seed)
    dev, test = [], []
    for o in range(k):
        tr, te = np.flatnonzero(outer != o), np.flatnonzero(outer == o)
        inner = stratified_kfold(y[tr], k, seed)
        scores = []
        for lam in grid:
            accs = []
            for i in range(k):
                a, b = tr[inner != i], tr[inner == i]
                W = _scipy_softmax_lr(X[a], y[a], 2, lam)
                accs.append(((np.c_[X[b], np.ones(len(b))] @ W).argmax(1) == y[b]).mean())
            scores.append(round(100 * np.mean(accs), 2))
        best = int(np.argmax(scores))
        W = _scipy_softmax_lr(X[tr], y[tr], 2, grid[best])
        dev.append(max(scores))
        test.append(round(100 * ((np.c_[X[te], np.ones(len(te))] @ W).argmax(1) == y[te]).mean(), 2))
    return round(np.mean(test), 2), round(np.mean(dev), 2)


def test_inner_kfold_equals_plain_reference():
    X, y = _noisy_blobs(120, 4, 2, seed=5, scale=1.0)
    grid = (1e-3, 1e-1, 3.0)
    out = inner_kfold_eval(X, y, k=3, l2_grid=grid, seed=11, device="cpu")
    acc, dev = _reference_inner_kfold(X, y, 3, grid, 11)
    assert (out["acc"], out["devacc"]) == (acc, dev)
    assert len(out["l2"]) == 3 and set(out["l2"]) <= set(grid)


def test_grid_and_pair_features():
    assert SENTEVAL_L2 == (1e-5, 1e-4, 1e-3, 1e-2)
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]])
    np.testing.assert_array_equal(ev.pair_features(u, v), [[1, -2, 3, 4, 2, 6, 3, -8]])
    np.testing.assert_array_equal(ev.pair_features(u, v, "senteval"), [[2, 6, 3, -8]])
    with pytest.raises(ValueError, match="pair features"):
        ev.pair_features(u, v, "concat")


@pytest.mark.data
def test_transfer_suite_runs_on_real_data(senteval_root, bow_encoder):
    """The whole suite on cheap bag-of-words embeddings with 2 folds: every task scores above chance."""
    details: dict = {}
    scores = ev.evaluate_transfer(bow_encoder, root=senteval_root, kfold=2, show_progress=False,
                                  details=details, tasks=["CR", "TREC", "MRPC", "MPQA"], protocol="converged")
    assert list(scores) == ["CR", "MPQA", "TREC", "MRPC", "avg", "protocol"]
    assert scores["protocol"] == "converged" and details["mrpc_features"] == "uv_absdiff_prod"
    chance = {"CR": 63.8, "MPQA": 68.8, "TREC": 22.6, "MRPC": 66.5}  # majority class
    for task, floor in chance.items():
        assert floor < scores[task] <= 100, task
    assert details["tasks"]["MRPC"]["n"] == 4076 and 0 < details["tasks"]["MRPC"]["f1"] <= 100


@pytest.mark.data
def test_senteval_protocol_runs_on_real_data(senteval_root, bow_encoder, one_torch_thread):
    """The default protocol (SentEval's) on TREC and MRPC with 2 folds: above chance, SentEval's MRPC
    features, the protocol recorded."""
    details: dict = {}
    scores = ev.evaluate_transfer(bow_encoder, root=senteval_root, kfold=2, show_progress=False,
                                  details=details, tasks=["TREC", "MRPC"])
    assert list(scores) == ["TREC", "MRPC", "avg", "protocol"] and scores["protocol"] == "senteval"
    assert 22.6 < scores["TREC"] <= 100 and 66.5 < scores["MRPC"] <= 100
    assert scores["avg"] == round((scores["TREC"] + scores["MRPC"]) / 2, 2)
    assert details["mrpc_features"] == "senteval" and details["tasks"]["TREC"]["n_classifiers"] == 2 * 4 + 4
    with pytest.raises(ValueError, match="protocol: unknown transfer protocol 'sklearn'"):
        ev.evaluate_transfer(bow_encoder, root=senteval_root, tasks=["TREC"], protocol="sklearn")


@pytest.mark.data
def test_cli_transfer_records_the_protocol(senteval_root, tiny_bert_dir, tmp_path, capsys, monkeypatch,
                                           one_torch_thread):
    import json

    from hardmix.cli import main

    monkeypatch.setenv("HARDMIX_DATA", str(senteval_root.parent))
    load = ev.load_transfer_suite  # one task keeps the test short
    monkeypatch.setattr(ev, "load_transfer_suite", lambda tasks, root=None: load(("TREC",), root))
    out = tmp_path / "scores.json"
    assert main(["eval", "text", str(tiny_bert_dir), "--tasks", "transfer", "--protocol", "converged",
                 "--json", str(out)]) == 0
    assert "converged protocol, not comparable" in capsys.readouterr().out
    scores = json.loads(out.read_text())["transfer"]
    assert list(scores) == ["TREC", "avg", "protocol"] and scores["protocol"] == "converged"
    assert scores["avg"] == scores["TREC"] and 0 < scores["TREC"] <= 100
    with pytest.raises(SystemExit):
        main(["eval", "text", str(tiny_bert_dir), "--protocol", "sklearn"])
    assert "invalid choice: 'sklearn'" in capsys.readouterr().err
