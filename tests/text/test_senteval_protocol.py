"""SentEval's transfer protocol: the batched classifier against one-at-a-time torch training, per-member
early stopping, and the folds and splits of every task against SentEval's (scikit-learn's splitter)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from hardmix.text import evaluation as ev
from hardmix.text.senteval_classifier import ClassifierConfig, Member, initial_linear, train_members
from hardmix.text.senteval_protocol import (
    SENTEVAL_L2,
    inner_kfold_members,
    kfold_members,
    senteval_order,
    stratified_folds,
    validation_split,
)


def _one_at_a_time(X, y, m: Member, C: int, cfg: ClassifierConfig):
    """Independent reference: one classifier trained as SentEval's ``PyTorchClassifier.fit`` does, with
    torch's own ``nn.Linear``, ``CrossEntropyLoss``, autograd and ``optim.Adam(weight_decay=l2)``, and the
    global numpy generator seeded as SentEval seeds it. Returns (best model, best correct, best epoch,
    last epoch, Adam steps)."""
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = torch.nn.Linear(X.shape[1], C)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=m.l2)
    if m.split_draw:
        np.random.permutation(m.split_draw)
    Xt, yt = torch.as_tensor(X[m.train]), torch.as_tensor(y[m.train])
    Xv, yv = torch.as_tensor(X[m.val]), torch.as_tensor(y[m.val])
    best, fails, epoch, stop, steps = -1, 0, 0, False, 0
    loss_fn = torch.nn.CrossEntropyLoss()
    while not stop and epoch <= cfg.max_epoch:
        for _ in range(cfg.epoch_size):
            perm = np.random.permutation(len(Xt))
            for i in range(0, len(Xt), cfg.batch_size):
                idx = torch.from_numpy(perm[i:i + cfg.batch_size])
                loss = loss_fn(model(Xt[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
        epoch += cfg.epoch_size
        with torch.no_grad():
            correct = int((model(Xv).argmax(1) == yv).sum())
        if correct > best:
            best, best_model, best_epoch = correct, copy.deepcopy(model), epoch
        else:
            if fails >= cfg.tenacity:
                stop = True
            fails += 1
    return best_model, best, best_epoch, epoch, steps


def _toy(n: int = 700, d: int = 8, C: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    X = rng.standard_normal((C, d))[y] * 0.7 + rng.standard_normal((n, d)) + 0.5
    return X.astype(np.float32), y


def test_batched_members_equal_one_at_a_time_training(one_torch_thread):
    X, y = _toy()
    cfg = ClassifierConfig(max_epoch=28)
    members = [
        Member(np.arange(0, 500), np.arange(500, 700), 1e-3),
        Member(np.arange(0, 100), np.arange(500, 700), 1e-2),  # 2 batches a pass: waits for the others
        Member(np.arange(100, 600), np.arange(600, 700), 1e-5),
        validation_split(np.arange(600)[::-1].copy(), cfg.seed, 1e-4),  # its stream draws the split first
        Member(np.arange(0, 500), np.arange(500, 700), 3e-2),  # the first one's batches: trained as a group
    ]
    fit = train_members(X, y, members, 3, cfg, device="cpu")
    for i, m in enumerate(members):
        model, best, best_epoch, stop, steps = _one_at_a_time(X, y, m, 3, cfg)
        assert fit.best_correct[i] == best and fit.best_epoch[i] == best_epoch and fit.stop_epoch[i] == stop
        assert fit.steps[i] == steps
        torch.testing.assert_close(fit.weight[i], model.weight.detach(), atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(fit.bias[i], model.bias.detach(), atol=2e-6, rtol=1e-5)
        np.testing.assert_array_equal(fit.predict(X, np.array([i]))[0], model(torch.as_tensor(X)).argmax(1))
    assert len(set(fit.best_epoch.tolist())) > 1  # the members' early stopping differed


def test_initial_weights_are_nn_linear_after_the_seed():
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    w, b = initial_linear(7, 4, seed=1111)
    assert torch.equal(torch.rand(3), before)  # the global generator is untouched
    torch.manual_seed(1111)
    lin = torch.nn.Linear(7, 4)
    assert torch.equal(w, lin.weight.detach()) and torch.equal(b, lin.bias.detach())


def test_early_stopping_is_per_member(one_torch_thread):
    """A member validated on one sample it gets right at the first check can never improve: it stops at the
    check where its 6th failure is counted (tenacity 5), epoch 4 + 6 x 4 = 28, and keeps its first model;
    a member trained alongside it is unaffected (the same as trained alone)."""
    X, y = _toy(seed=1)
    cfg = ClassifierConfig(max_epoch=60)
    lone = Member(np.arange(0, 400), np.arange(400, 700), 1e-4)
    alone = train_members(X, y, [lone], 3, cfg, device="cpu")
    first = train_members(X, y, [Member(np.arange(0, 400), np.arange(0, 400), 1e-4)], 3,
                          ClassifierConfig(max_epoch=0), device="cpu")
    easy = int(np.flatnonzero(first.predict(X)[0] == y)[0])  # right after the first check
    one = Member(np.arange(0, 400), np.array([easy]), 1e-4)
    both = train_members(X, y, [one, lone], 3, cfg, device="cpu")
    assert both.best_correct[0] == 1 and both.best_epoch[0] == 4 and both.stop_epoch[0] == 28
    torch.testing.assert_close(both.weight[0], first.weight[0])
    assert both.stop_epoch[1] == alone.stop_epoch[0] and both.best_epoch[1] == alone.best_epoch[0]
    torch.testing.assert_close(both.weight[1], alone.weight[0])
    # max_epoch: training continues while the epoch counter is <= max_epoch, 4 passes at a time
    capped = train_members(X, y, [lone], 3, ClassifierConfig(max_epoch=12, tenacity=100), device="cpu")
    assert capped.stop_epoch[0] == 16


def test_stratified_folds_sizes_and_sklearn():
    rng = np.random.default_rng(3)
    y = rng.choice([4, 1, 7], size=103, p=[0.5, 0.3, 0.2])
    folds = stratified_folds(y, 10, 1111)
    order_sizes = [len(range(i, len(y), 10)) for i in range(10)]  # the sorted labels dealt round-robin
    assert np.bincount(folds, minlength=10).tolist() == order_sizes
    for c in np.unique(y):
        per = np.bincount(folds[y == c], minlength=10)
        assert per.max() - per.min() <= 1
    sk = pytest.importorskip("sklearn.model_selection", reason="scikit-learn gives the reference folds")
    for seed in (1111, 7):
        ref = sk.StratifiedKFold(n_splits=10, shuffle=True, random_state=seed)
        for f, (_, test) in enumerate(ref.split(np.zeros(len(y)), y)):
            np.testing.assert_array_equal(np.flatnonzero(stratified_folds(y, 10, seed) == f), test)


def test_senteval_order_is_a_stable_sort_on_length_then_label():
    keys = [(3, 1), (2, 0), (3, 0), (2, 0), (1, 1)]
    assert senteval_order(keys).tolist() == [4, 1, 3, 2, 0]


def test_validation_split_is_the_first_numpy_draw():
    rows = np.arange(100, 300)
    m = validation_split(rows, 1111, 1e-3)
    np.random.seed(1111)
    perm = np.random.permutation(200)
    assert m.val.tolist() == (100 + perm[:10]).tolist() and m.train.tolist() == (100 + perm[10:]).tolist()
    assert m.split_draw == 200 and m.l2 == 1e-3


# ------------------------------------------------------------------------ per task, on the real data
def _sklearn_splits(y, seed):
    sk = pytest.importorskip("sklearn.model_selection", reason="scikit-learn gives the reference folds")
    return list(sk.StratifiedKFold(n_splits=10, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _sorted_labels(d) -> np.ndarray:
    keys = [(len(s.split()), int(c)) for s, c in zip(d.sentences, d.labels)]
    return np.asarray(d.labels)[senteval_order(keys)]


@pytest.mark.data
@pytest.mark.parametrize("task, n", [("MR", 10662), ("CR", 3775), ("SUBJ", 10000), ("MPQA", 10606)])
def test_inner_kfold_folds_are_senteval_s(senteval_root, task, n):
    """MR, CR, SUBJ, MPQA: SentEval sorts the samples, then StratifiedKFold(10, shuffle, 1111) outer and
    inner; its final classifiers hold out int(0.05 n) of the outer training set."""
    d = ev.load_transfer_suite([task], senteval_root)[task]
    y = _sorted_labels(d)
    assert len(y) == n
    members, plan = inner_kfold_members(y, 10, SENTEVAL_L2, 1111)
    assert len(members) == 10 * 4 * 11
    for (tr, te), (test_rows, grid, final) in zip(_sklearn_splits(y, 1111), plan):
        np.testing.assert_array_equal(test_rows, te)
        inner = _sklearn_splits(y[tr], 1111)
        for r, l2 in enumerate(SENTEVAL_L2):
            for i, (a, b) in enumerate(inner):
                m = members[grid[r, i]]
                np.testing.assert_array_equal(m.train, tr[a])
                np.testing.assert_array_equal(m.val, tr[b])
                assert m.l2 == l2 and m.split_draw == 0
            f = members[final[r]]
            assert len(f.val) == int(0.05 * len(tr)) and len(f.train) == len(tr) - len(f.val)
            assert sorted(np.concatenate([f.train, f.val]).tolist()) == tr.tolist()
    sizes = sorted({len(t) for t, _, _ in plan})
    assert sizes == sorted({math.ceil((n - i) / 10) for i in range(10)})


@pytest.mark.data
@pytest.mark.parametrize("task, n, n_test, split", [("TREC", 5452, 500, 272), ("MRPC", 4076, 1725, 203)])
def test_kfold_folds_are_senteval_s(senteval_root, task, n, n_test, split):
    suite = ev.load_transfer_suite([task], senteval_root)[task]
    if task == "TREC":
        y = _sorted_labels(suite["train"])
    else:
        p = suite["train"]
        keys = [(len(a.split()), len(b.split()), int(c)) for a, b, c in zip(p.sent1, p.sent2, p.labels)]
        y = np.asarray(p.labels)[senteval_order(keys)]
    assert len(y) == n and len(suite["test"].labels) == n_test
    members, grid, final = kfold_members(y, 10, SENTEVAL_L2, 1111)
    for f, (a, b) in enumerate(_sklearn_splits(y, 1111)):
        for r in range(4):
            np.testing.assert_array_equal(members[grid[r, f]].train, a)
            np.testing.assert_array_equal(members[grid[r, f]].val, b)
    for r in range(4):
        assert len(members[final[r]].val) == split and len(members[final[r]].train) == n - split


@pytest.mark.data
def test_sst_split_sizes(senteval_root):
    d = ev.load_transfer_suite(["SST"], senteval_root)["SST"]
    assert [len(d[s].labels) for s in ("train", "dev", "test")] == [67349, 872, 1821]


# ------------------------------------------------------------------------ the evaluation and the CLI
def test_pair_features_are_senteval_s():
    """MRPC's features are SentEval's [|u - v|, u * v]."""
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]])
    np.testing.assert_array_equal(ev.pair_features(u, v), [[2, 6, 3, -8]])


@pytest.mark.data
def test_transfer_runs_on_real_data(senteval_root, bow_encoder, one_torch_thread):
    """SentEval's protocol on TREC and MRPC with 2 folds: above chance (the majority class), the average of
    the rounded scores, the protocol recorded, SentEval's classifier count."""
    details: dict = {}
    scores = ev.evaluate_transfer(bow_encoder, root=senteval_root, kfold=2, show_progress=False,
                                  details=details, tasks=["TREC", "MRPC"])
    assert list(scores) == ["TREC", "MRPC", "avg", "protocol"] and scores["protocol"] == "senteval"
    assert 22.6 < scores["TREC"] <= 100 and 66.5 < scores["MRPC"] <= 100
    assert scores["avg"] == round((scores["TREC"] + scores["MRPC"]) / 2, 2)
    assert details["protocol"] == "senteval" and details["tasks"]["TREC"]["n_classifiers"] == 2 * 4 + 4
    assert 0 < details["tasks"]["MRPC"]["f1"] <= 100


@pytest.mark.data
def test_cli_transfer_writes_the_protocol_and_refuses_another(senteval_root, tiny_bert_dir, tmp_path, capsys,
                                                              monkeypatch, one_torch_thread):
    """``hardmix eval text --tasks transfer --json`` writes ``"protocol": "senteval"`` beside the scores;
    ``--protocol senteval`` is accepted, any other (the removed ``converged``) is refused with one line on
    stderr, exit status 2, before the model is loaded."""
    import json

    from hardmix.cli import main

    monkeypatch.setenv("HARDMIX_DATA", str(senteval_root.parent))
    load = ev.load_transfer_suite  # one task keeps the test short
    monkeypatch.setattr(ev, "load_transfer_suite", lambda tasks, root=None: load(("TREC",), root))
    out = tmp_path / "scores.json"
    assert main(["eval", "text", str(tiny_bert_dir), "--tasks", "transfer", "--json", str(out)]) == 0
    assert "SentEval's protocol and classifier" in capsys.readouterr().out
    scores = json.loads(out.read_text())["transfer"]
    assert list(scores) == ["TREC", "avg", "protocol"] and scores["protocol"] == "senteval"
    assert scores["avg"] == scores["TREC"] and 0 < scores["TREC"] <= 100

    missing = str(tmp_path / "no_model")  # the protocol is checked first; then the model is looked for
    assert main(["eval", "text", missing, "--protocol", "senteval"]) == 2
    assert "no_model" in capsys.readouterr().err
    assert main(["eval", "text", missing, "--protocol", "converged"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "hardmix: error: --protocol converged: the only transfer protocol is senteval " \
                           "(SentEval's)\n"
    assert captured.out == ""
