"""SentEval's transfer protocol (``senteval/tools/validation.py`` with its PyTorch classifier), reproduced.

The three validation schemes of SentEval, as SimCSE's and MixCSE's ``evaluation.py`` run them
(``usepytorch``, ``kfold`` 10, seed 1111, the L2 grid ``[10**t for t in range(-5, -1)]``), each trained as
one batched model (:func:`hardmix.text.senteval_classifier.train_members`):

- :func:`inner_kfold` (MR, CR, SUBJ, MPQA; SentEval's ``InnerKFoldClassifier``): k stratified outer folds
  (``StratifiedKFold(shuffle=True, random_state=1111)``, a seed SentEval fixes here whatever its ``seed``);
  on each outer training set the same splitter makes k inner folds, and for every L2 value a classifier
  is trained on each inner training set with early stopping on its inner test fold; the L2 value with
  the best mean inner accuracy (in percent, rounded to 2 decimals, the first on ties) is the outer
  fold's; a classifier with it trained on the outer training set (early stopping on 5% of it, split off
  with the classifier's numpy seed) is scored on the outer test fold. Result: the mean of the k outer
  accuracies (each rounded to 2 decimals).
- :func:`kfold` (TREC, MRPC; ``KFoldClassifier``): stratified k-fold cross-validation on the training set
  (``random_state`` = seed) picks the L2 value the same way; a classifier trained on the whole training
  set (early stopping on 5% of it) is scored on the test set.
- :func:`split` (SST-2; ``SplitClassifier``): a classifier per L2 value, each with early stopping on the
  dev set; the best dev accuracy picks the L2 value; its test accuracy. (SentEval trains the chosen one
  again with the same seed and data: the same model.)

What SentEval does in sequence, one classifier at a time, is one batch here; the final classifiers are
trained for every L2 value alongside the grid (they do not depend on each other) and the chosen one is
read off, so a task is one batched run. Folds come from :func:`stratified_folds`, SentEval's splitter
(scikit-learn's ``StratifiedKFold`` since 0.22) re-implemented in numpy; the order of the samples, which
decides the folds, is SentEval's (:func:`senteval_order`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hardmix.text.senteval_classifier import ClassifierConfig, Member, MemberFit, train_members

#: SentEval's L2 grid of its PyTorch classifier.
SENTEVAL_L2: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
#: SentEval's seed (its default, and the papers').
SENTEVAL_SEED = 1111
#: The fraction of the training data SentEval's final classifiers hold out for early stopping.
VALIDATION_SPLIT = 0.05


def senteval_order(keys: Sequence[tuple]) -> np.ndarray:
    """SentEval's sort of a task's samples "to reduce padding": a stable sort on per-sample keys
    ((tokens, label); MRPC: (tokens of A, tokens of B, label)). The order decides the folds.

    Args:
        keys: n tuples.

    Returns:
        (n,) int64 indices of the samples in SentEval's order.
    """
    return np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def stratified_folds(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Test-fold id of every sample as ``StratifiedKFold(k, shuffle=True, random_state=seed)`` assigns it.

    Classes are numbered in order of first appearance; the sorted labels are dealt round-robin to the k
    folds, which fixes how many samples of each class each fold gets; then, class by class, the fold ids
    of that class's samples (fold 0's block, fold 1's, ...) are shuffled by one ``RandomState(seed)``.

    Args:
        y: (n,) labels.
        k: number of folds (at most the size of the largest class).
        seed: ``random_state``.

    Returns:
        (n,) int64 fold ids in [0, k); fold f's test set is ``folds == f``, its training set the rest,
        both in increasing sample order.
    """
    y = np.asarray(y)
    _, first, inverse = np.unique(y, return_index=True, return_inverse=True)
    cls = np.argsort(np.argsort(first))[inverse.ravel()]  # classes by order of appearance
    n_classes = len(first)
    if np.all(k > np.bincount(cls)):
        raise ValueError(f"kfold: {k} folds but no class has that many samples")
    order = np.sort(cls)
    allocation = np.stack([np.bincount(order[i::k], minlength=n_classes) for i in range(k)])
    rng = np.random.RandomState(seed)
    folds = np.empty(len(y), dtype=np.int64)
    for c in range(n_classes):
        ids = np.repeat(np.arange(k), allocation[:, c])
        rng.shuffle(ids)
        folds[cls == c] = ids
    return folds


def validation_split(rows: np.ndarray, seed: int, l2: float, fraction: float = VALIDATION_SPLIT) -> Member:
    """The training and validation rows of a classifier fitted with ``validation_split=fraction``: its
    first numpy draw (from ``RandomState(seed)``) permutes the rows; the first ``int(fraction * n)`` of
    the permutation validate, the rest train (in permuted order).

    Args:
        rows: (n,) rows of the training data.
        seed: the classifier's seed.
        l2: its L2 value.
        fraction: the held-out fraction.

    Returns:
        A :class:`Member` with ``split_draw`` n.
    """
    perm = np.random.RandomState(seed).permutation(len(rows))
    cut = int(fraction * len(rows))
    return Member(train=rows[perm[cut:]], val=rows[perm[:cut]], l2=l2, split_draw=len(rows))


def _accuracy(fit: MemberFit, i: int, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    pred = fit.predict(X, np.array([i]))[0]
    return float(np.sum(pred == y)) / len(y), pred


def _pick(scores: list[float]) -> int:
    """SentEval's ``np.argmax`` over the rounded scores (the first best)."""
    return int(np.argmax(scores))


def inner_kfold_members(
    y: np.ndarray, k: int, l2_grid: Sequence[float], seed: int, fold_seed: int = 1111
) -> tuple[list[Member], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The classifiers of SentEval's ``InnerKFoldClassifier`` on N samples (rows of the task's features).

    Args:
        y: (N,) labels, in SentEval's sample order.
        k: outer and inner folds.
        l2_grid: R L2 values.
        seed: the classifiers' seed (their validation split).
        fold_seed: the splitters' ``random_state``.

    Returns:
        (members, plan): per outer fold, (its test rows, (R, k) member ids of the inner classifiers, (R,)
        member ids of the final classifiers, one per L2 value).
    """
    outer = stratified_folds(y, k, fold_seed)
    members: list[Member] = []
    plan = []
    for o in range(k):
        tr, te = np.flatnonzero(outer != o), np.flatnonzero(outer == o)
        inner = stratified_folds(y[tr], k, fold_seed)
        grid = np.zeros((len(l2_grid), k), dtype=np.int64)
        final = np.zeros(len(l2_grid), dtype=np.int64)
        for r, l2 in enumerate(l2_grid):
            for i in range(k):
                grid[r, i] = len(members)
                members.append(Member(train=tr[inner != i], val=tr[inner == i], l2=float(l2)))
            final[r] = len(members)
            members.append(validation_split(tr, seed, l2=float(l2)))
        plan.append((te, grid, final))
    return members, plan


def kfold_members(
    y_train: np.ndarray, k: int, l2_grid: Sequence[float], seed: int
) -> tuple[list[Member], np.ndarray, np.ndarray]:
    """The classifiers of SentEval's ``KFoldClassifier`` on N training samples (rows 0..N-1).

    Args:
        y_train: (N,) labels, in SentEval's sample order.
        k: folds.
        l2_grid: R L2 values.
        seed: the splitter's ``random_state`` and the classifiers' seed.

    Returns:
        (members, (R, k) member ids of the cross-validation classifiers, (R,) member ids of the final ones).
    """
    folds = stratified_folds(y_train, k, seed)
    rows = np.arange(len(y_train))
    members = [Member(train=rows[folds != f], val=rows[folds == f], l2=float(l2))
               for l2 in l2_grid for f in range(k)]
    grid = np.arange(len(members)).reshape(len(l2_grid), k)
    final = np.arange(len(members), len(members) + len(l2_grid))
    members += [validation_split(rows, seed, l2=float(l2)) for l2 in l2_grid]
    return members, grid, final


def inner_kfold(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    k: int = 10,
    seed: int = SENTEVAL_SEED,
    l2_grid: Sequence[float] = SENTEVAL_L2,
    config: ClassifierConfig | None = None,
    device: str | torch.device | None = None,
    fold_seed: int = 1111,
) -> dict:
    """SentEval's ``InnerKFoldClassifier`` (MR, CR, SUBJ, MPQA).

    Args:
        X: (N, D) features, in SentEval's sample order.
        y: (N,) labels.
        n_classes: C.
        k: outer and inner folds.
        seed: the classifiers' seed.
        l2_grid: L2 values.
        config: classifier settings (default SentEval's, with ``seed``).
        device: torch device.
        fold_seed: the splitters' ``random_state`` (SentEval fixes it to 1111).

    Returns:
        ``{"acc": mean outer test accuracy (%), "devacc": mean best inner accuracy (%), "l2": [chosen L2
        per outer fold], "n": N, "n_classifiers": trained, "epochs": [mean best epoch, mean stop epoch]}``.
    """
    config = config or ClassifierConfig(seed=seed)
    members, plan = inner_kfold_members(y, k, l2_grid, config.seed, fold_seed)
    fit = train_members(X, y, members, n_classes, config, device)
    acc = fit.val_accuracy()
    dev, test, chosen, used = [], [], [], []
    for te, grid, final in plan:
        scores = [round(100 * np.mean(acc[grid[r]]), 2) for r in range(len(l2_grid))]
        best = _pick(scores)
        dev.append(np.max(scores))
        chosen.append(l2_grid[best])
        test.append(round(100 * _accuracy(fit, final[best], X[te], y[te])[0], 2))
        used += [*grid.ravel(), final[best]]
    return {"acc": float(round(np.mean(test), 2)), "devacc": float(round(np.mean(dev), 2)), "l2": chosen,
            "n": len(y), **_summary(fit, used)}


def kfold(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    k: int = 10,
    seed: int = SENTEVAL_SEED,
    l2_grid: Sequence[float] = SENTEVAL_L2,
    config: ClassifierConfig | None = None,
    device: str | torch.device | None = None,
) -> dict:
    """SentEval's ``KFoldClassifier`` (TREC, MRPC).

    Args:
        X_train: (N, D) training features, in SentEval's order; y_train: (N,) labels.
        X_test: (N', D) test features; y_test: (N',) labels.
        n_classes: C.
        k: folds of the cross-validation.
        seed: the splitter's ``random_state`` and the classifiers' seed.
        l2_grid, config, device: as :func:`inner_kfold`.

    Returns:
        ``{"acc": test accuracy (%), "devacc": best cross-validation accuracy (%), "l2": chosen L2,
        "pred": (N',) test predictions, "n": N, "n_test": N', ...}``.
    """
    config = config or ClassifierConfig(seed=seed)
    members, grid, finals = kfold_members(y_train, k, l2_grid, config.seed)
    N = len(y_train)
    X = np.concatenate([X_train, X_test])
    y = np.concatenate([y_train, y_test])
    fit = train_members(X, y, members, n_classes, config, device)
    acc = fit.val_accuracy()
    scores = [round(100 * np.mean(acc[grid[r]]), 2) for r in range(len(l2_grid))]
    best = _pick(scores)
    test_acc, pred = _accuracy(fit, finals[best], X_test, y_test)
    return {"acc": round(100 * test_acc, 2), "devacc": float(np.max(scores)), "l2": l2_grid[best],
            "pred": pred, "n": N, "n_test": len(y_test), **_summary(fit, [*grid.ravel(), finals[best]])}


def split(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_dev: np.ndarray,
    y_dev: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    seed: int = SENTEVAL_SEED,
    l2_grid: Sequence[float] = SENTEVAL_L2,
    config: ClassifierConfig | None = None,
    device: str | torch.device | None = None,
) -> dict:
    """SentEval's ``SplitClassifier`` (SST-2).

    Args:
        X_train, y_train: (N, D) and (N,) training data, in SentEval's order.
        X_dev, y_dev: the validation (dev) split.
        X_test, y_test: the test split.
        n_classes: C.
        seed, l2_grid, config, device: as :func:`inner_kfold`.

    Returns:
        ``{"acc": test accuracy (%), "devacc": best dev accuracy (%), "l2": chosen L2, "n": N, ...}``.
    """
    config = config or ClassifierConfig(seed=seed)
    N, V = len(y_train), len(y_dev)
    X = np.concatenate([X_train, X_dev])
    y = np.concatenate([y_train, y_dev])
    members = [Member(train=np.arange(N), val=np.arange(N, N + V), l2=float(l2)) for l2 in l2_grid]
    fit = train_members(X, y, members, n_classes, config, device)
    scores = [round(100 * a, 2) for a in fit.val_accuracy()]
    best = _pick(scores)
    test_acc, _ = _accuracy(fit, best, X_test, y_test)
    return {"acc": round(100 * test_acc, 2), "devacc": float(np.max(scores)), "l2": l2_grid[best], "n": N,
            "n_test": len(y_test), **_summary(fit, [*range(len(l2_grid)), best])}  # SentEval trains it again


def _summary(fit: MemberFit, sequential: list[int]) -> dict:
    """The batch's record: its size, mean best and stop epochs, and the Adam steps SentEval's sequential
    run makes (the members it trains: ``sequential``, with repeats; the other L2 values' final
    classifiers only exist here)."""
    return {"n_classifiers": len(fit.best_epoch),
            "epochs": [round(float(fit.best_epoch.mean()), 1), round(float(fit.stop_epoch.mean()), 1)],
            "senteval_steps": int(fit.steps[np.asarray(sequential, dtype=np.int64)].sum())}
