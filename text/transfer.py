"""Transfer-task classifiers: L2-regularised logistic regression on frozen embeddings, many models at once.

SentEval's protocol (``senteval/tools/validation.py``), with its PyTorch-classifier grid of L2 penalties
:data:`SENTEVAL_L2` = 1e-5, 1e-4, 1e-3, 1e-2 (SentEval's ``weight_decay`` on a linear layer, weights and
bias):

- :func:`inner_kfold_eval` (MR, CR, SUBJ, MPQA): k stratified outer folds; on each outer training set,
  k stratified inner folds choose the penalty (highest mean inner accuracy, rounded to 2 decimals in
  percent, the first one on ties), and the model trained with it on the whole outer training set is scored
  on the outer test fold; the result is the mean of the k outer accuracies.
- :func:`kfold_eval` (TREC, MRPC): k-fold cross-validation on the training set chooses the penalty, a
  model trained on the whole training set is scored on the test set.
- :func:`split_eval` (SST-2): the dev set chooses the penalty; test accuracy of that model.

What differs from SentEval, by design: SentEval trains each model with mini-batch Adam and early stopping
on held-out data (on the inner test fold, or on 5% of the training data for the final model), one model at
a time. Here every model is trained to convergence on the regularised objective

    mean cross-entropy + (l2 / 2) * ||[W, b]||^2

(the objective SentEval's Adam-with-weight-decay descends), and all the models of a protocol (for 10x10
folds and 4 penalties, 440 models) are one batched problem: the features are shared, each model has its
own sample weights (its training fold) and penalty, and a batched L-BFGS with a per-model Armijo line search
solves them together with two matrix products per step. Folds are stratified and seeded, so results are
deterministic for a given seed. Everything runs on the GPU when there is one, else with torch on the CPU.
Two-class problems use one logit (the two-logit softmax model with penalty l2/2 on both rows is exactly a
logistic model with penalty l2/4 on their difference).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

#: SentEval's L2 grid for its PyTorch classifier (``[10**t for t in range(-5, -1)]``).
SENTEVAL_L2: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)


def default_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def stratified_kfold(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Assign each sample to one of ``k`` stratified folds.

    Each class's samples are shuffled (seeded) and dealt round-robin, the classes one after the other, so
    every fold gets n_c / k (+-1) samples of each class c and the fold sizes differ by at most one.

    Args:
        y: (n,) integer labels.
        k: number of folds (2 <= k <= n).
        seed: seed of the shuffle.

    Returns:
        (n,) int64 fold ids in [0, k).
    """
    y = np.asarray(y)
    if not 2 <= k <= len(y):
        raise ValueError(f"k={k} folds for {len(y)} samples")
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(y == c)) for c in np.unique(y)])
    folds = np.empty(len(y), dtype=np.int64)
    folds[order] = np.arange(len(y)) % k
    return folds


@dataclass
class LogRegFit:
    """Parameters of a batch of M fitted logistic-regression models.

    Attributes:
        theta: (D + 1, M, C') weights with the bias as the last row; C' = 1 (one logit) for two classes,
            else C.
        n_classes: C.
        n_iter: (M,) L-BFGS iterations used by each model.
        converged: (M,) whether each model met the gradient tolerance (else it stopped on max_iter or on
            a line search that could not improve at float precision).
    """

    theta: torch.Tensor
    n_classes: int
    n_iter: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    converged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def logits(self, X: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Logits of every model: (N, D) features -> (M, N, C') (C' = 1 for two classes)."""
        X = torch.as_tensor(X, dtype=self.theta.dtype, device=self.theta.device)
        D1, M, C = self.theta.shape
        z = X @ self.theta[:-1].reshape(D1 - 1, M * C) + self.theta[-1].reshape(1, M * C)
        return z.reshape(-1, M, C).permute(1, 0, 2)

    def predict(self, X: torch.Tensor | np.ndarray) -> np.ndarray:
        """Predicted classes of every model, (M, N) int64 (ties go to the lower class, as argmax does)."""
        z = self.logits(X)
        pred = (z[..., 0] > 0).long() if self.n_classes == 2 else z.argmax(-1)
        return pred.cpu().numpy()


def _objective(
    Xa: torch.Tensor,
    y: torch.Tensor,
    W: torch.Tensor,
    lam: torch.Tensor,
    theta: torch.Tensor,
    n_classes: int,
    W_signed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss and gradient of every model.

    Args:
        Xa: (N, D + 1) features with a trailing column of ones.
        y: (N,) labels: int64 class ids (C > 2), or for two classes the signs 1 - 2 y (float).
        W: (N, M) sample weights (1 / n_m on model m's training samples, 0 elsewhere).
        lam: (M,) penalty coefficients (of (lam / 2) ||theta_m||^2 in the model's own parametrisation).
        theta: (D + 1, M, C') parameters.
        n_classes: C.
        W_signed: (N, M) ``(1 - 2 y) * W`` (two classes only).

    Returns:
        (loss (M,), gradient (D + 1, M, C')).
    """
    D1, M, C = theta.shape
    z = (Xa @ theta.reshape(D1, M * C)).reshape(-1, M, C)
    if n_classes == 2:
        # logistic loss softplus(-z) for y = 1, softplus(z) for y = 0: softplus(s) with s = (1 - 2y) z;
        # its derivative in z is (1 - 2y) sigmoid(s)
        s = z[..., 0].mul_(y[:, None])
        per = torch.nn.functional.softplus(s)
        resid = torch.sigmoid(s).mul_(W_signed)[..., None]
    else:
        lse = torch.logsumexp(z, dim=-1)
        per = lse - z.gather(-1, y[:, None, None].expand(-1, M, 1))[..., 0]
        p = torch.exp(z - lse[..., None])
        p[torch.arange(len(y), device=y.device), :, y] -= 1.0
        resid = p.mul_(W[..., None])
    loss = torch.linalg.vecdot(per, W, dim=0) + 0.5 * lam * (theta * theta).sum(dim=(0, 2))
    grad = (Xa.T @ resid.reshape(-1, M * C)).reshape(D1, M, C) + lam[None, :, None] * theta
    return loss, grad


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-model inner product of two (D + 1, M, C') tensors -> (M,)."""
    return (a * b).sum(dim=(0, 2))


def fit_logreg(
    X: np.ndarray | torch.Tensor,
    y: np.ndarray,
    train_masks: np.ndarray,
    l2: np.ndarray | list[float],
    n_classes: int | None = None,
    device: str | torch.device | None = None,
    max_iter: int = 1000,
    gtol: float = 1e-7,
    history: int = 10,
    dtype: torch.dtype = torch.float64,
) -> LogRegFit:
    """Fit M L2-regularised (multinomial) logistic regressions on shared features at once.

    Model m minimises ``mean_{i in train_m} CE(x_i W_m + b_m, y_i) + (l2_m / 2) ||[W_m, b_m]||^2`` over its
    C x (D + 1) parameters (for C = 2 the equivalent one-logit model is solved).

    The solver is L-BFGS in a preconditioned basis: with ``E = [X, 1]^T [X, 1] / N = U diag(e) U^T``,
    model m's parameters are ``theta = U diag((e / 4 + l2_m)^(-1/2)) phi`` (two classes; for C classes
    the class axis is spanned by an orthonormal basis of the C - 1 zero-sum directions, where the optimum
    lies, scaled by ``(e / C + l2_m)^(-1/2)``) and L-BFGS runs on ``phi``: an approximation of the inverse
    Hessian's square root at uniform predictions. This leaves the objective and its minimiser unchanged
    but makes the raw (anisotropic, uncentred) embeddings as easy to fit as whitened ones (a handful of
    iterations instead of hundreds).

    Args:
        X: (N, D) features.
        y: (N,) integer labels in [0, C).
        train_masks: (M, N) booleans, the training samples of each model (each non-empty).
        l2: (M,) penalties.
        n_classes: C (default: max(y) + 1).
        device: torch device (default: CUDA when available, else CPU).
        max_iter: L-BFGS iterations at most.
        gtol: a model stops when the largest absolute entry of its gradient with respect to ``phi`` (the
            preconditioned gradient, which bounds the distance to the optimum in every direction, unlike
            the raw gradient) is below this.
        history: L-BFGS memory.
        dtype: float64 by default: the solution is then the optimum to far better than the precision that
            decides any prediction, so results do not depend on solver details; float32 is faster but
            limits the accuracy of the solution in low-variance directions.

    Returns:
        The fitted models (:class:`LogRegFit`).
    """
    device = torch.device(device) if device is not None else default_device()
    masks = np.asarray(train_masks, dtype=bool)
    C = int(n_classes if n_classes is not None else np.max(y) + 1)
    work = masks.shape[0] * masks.shape[1] * (np.shape(X)[1] + 1) * (1 if C == 2 else C)
    # small problems on the CPU run on one thread: tiny ops gain nothing from more, and on a busy machine
    # spinning OpenMP threads make them many times slower
    with _cpu_threads(1 if device.type == "cpu" and work < 5e7 else None):
        return _fit_logreg(X, y, masks, l2, C, device, max_iter, gtol, history, dtype)


@contextlib.contextmanager
def _cpu_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (None: leave the setting alone)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fit_logreg(
    X: np.ndarray | torch.Tensor,
    y: np.ndarray,
    masks: np.ndarray,
    l2: np.ndarray | list[float],
    C: int,
    device: torch.device,
    max_iter: int,
    gtol: float,
    history: int,
    dtype: torch.dtype,
) -> LogRegFit:
    """:func:`fit_logreg`'s solver (arguments checked and resolved)."""
    y_np = np.asarray(y, dtype=np.int64)
    lam_np = np.asarray(l2, dtype=np.float64)
    M, N = masks.shape
    if len(lam_np) != M or len(y_np) != N or np.any(masks.sum(1) == 0):
        raise ValueError(f"train_masks {masks.shape}, l2 {lam_np.shape}, y {y_np.shape}: "
                         "inconsistent shapes or an empty training set")
    X_np = X.detach().cpu().numpy() if torch.is_tensor(X) else np.asarray(X)
    Xa_np = np.concatenate([X_np.astype(np.float64), np.ones((N, 1))], axis=1)
    Xa = torch.as_tensor(Xa_np, dtype=dtype, device=device)
    D1 = Xa.shape[1]
    Cp = 1 if C == 2 else C
    W_full = torch.as_tensor((masks / masks.sum(1, keepdims=True)).T.copy(), dtype=dtype, device=device)
    if C == 2:
        y_t = torch.as_tensor(1.0 - 2.0 * y_np, dtype=dtype, device=device)  # signs
        Ws_full = W_full * y_t[:, None]
        lam_np = lam_np / 2.0  # softmax penalty l2/2 on both rows == one-logit penalty l2/4
    else:
        y_t = torch.as_tensor(y_np, device=device)
        Ws_full = None
    # preconditioner: the Hessian at predictions equal to the class priors pi is A (x) E, with
    # A = diag(pi) - pi pi^T and E the second moment of [X, 1]; from the eigenbases of A and E each model
    # gets the scales (a_k e_i + l2_m)^(-1/2). A's null vector (all ones) is left out: the optimum has zero
    # sum over the classes (there the penalty's gradient cancels the data term's), so C > 2 classes are
    # spanned by the C - 1 other eigenvectors Q; two classes have one logit (a = pi_1 pi_0)
    e, U_np = np.linalg.eigh(Xa_np.T @ Xa_np / N)
    e = np.clip(e, 0, None)[:, None, None]
    lam_b = lam_np[None, :, None]
    prior = np.bincount(y_np, minlength=C) / N
    prior = np.clip(prior, 1.0 / N, None)  # a class absent from the data still gets some curvature
    if C == 2:
        Q_np, Cq = np.ones((1, 1)), 1
        curv = prior[0] * prior[1] * e + lam_b
    else:
        a, V = np.linalg.eigh(np.diag(prior) - np.outer(prior, prior))
        Q_np, Cq = V[:, 1:], C - 1  # a[0] ~ 0 with the all-ones eigenvector
        curv = a[None, None, 1:] * e + lam_b
    U = torch.as_tensor(U_np, dtype=dtype, device=device)
    Q = torch.as_tensor(Q_np, dtype=dtype, device=device)
    scale_full = torch.as_tensor(1.0 / np.sqrt(curv), dtype=dtype, device=device)  # (D1, M, Cq)

    theta_out = torch.zeros(D1, M, Cp, dtype=dtype, device=device)
    n_iter = np.zeros(M, dtype=np.int64)
    converged = np.zeros(M, dtype=bool)

    ids = torch.arange(M, device=device)  # the working set, compacted as models finish
    W, Ws = W_full, Ws_full
    lam = torch.as_tensor(lam_np, dtype=dtype, device=device)
    scale = scale_full

    def to_theta(phi: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        m = phi.shape[1]
        return (U @ ((scale * phi) @ Q.T).reshape(D1, m * Cp)).reshape(D1, m, Cp)

    def evaluate(phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        theta = to_theta(phi, scale)
        loss, g_theta = _objective(Xa, y_t, W, lam, theta, C, Ws)
        m = phi.shape[1]
        g_phi = scale * ((U.T @ g_theta.reshape(D1, m * Cp)).reshape(D1, m, Cp) @ Q)
        return loss, g_phi, g_phi.abs().amax(dim=(0, 2))

    phi = torch.zeros(D1, M, Cq, dtype=dtype, device=device)
    loss, grad, gmax = evaluate(phi)
    S: list[torch.Tensor] = []
    Y: list[torch.Tensor] = []
    R: list[torch.Tensor] = []
    done = gmax <= gtol
    converged[done.cpu().numpy()] = True
    for it in range(1, max_iter + 1):
        if bool(done.all()):
            break
        # two-loop recursion, per model (pairs with rho = 0 are inert)
        q = -grad
        alphas = []
        for s, yv, rho in zip(reversed(S), reversed(Y), reversed(R)):
            a = rho * _dot(s, q)
            q = q - a[None, :, None] * yv
            alphas.append(a)
        if S:
            sy, yy = _dot(S[-1], Y[-1]), _dot(Y[-1], Y[-1])
            gamma = torch.where((sy > 0) & (yy > 0), sy / yy.clamp_min(1e-30), torch.ones_like(sy))
            q = q * gamma[None, :, None]
        for s, yv, rho, a in zip(S, Y, R, reversed(alphas)):
            b = rho * _dot(yv, q)
            q = q + (a - b)[None, :, None] * s
        d = q
        gd = _dot(grad, d)
        bad = gd >= 0  # not a descent direction (numerical trouble): steepest descent instead
        if bool(bad.any()):
            d = torch.where(bad[None, :, None], -grad, d)
            gd = _dot(grad, d)
        # backtracking Armijo line search, per model
        t = torch.ones(len(ids), dtype=dtype, device=device)
        accepted = done.clone()
        new = (phi, loss, grad, gmax)
        for _ in range(30):
            cand = phi + t[None, :, None] * d
            c_loss, c_grad, c_gmax = evaluate(cand)
            ok = ~accepted & (c_loss <= loss + 1e-4 * t.double() * gd.double())
            if bool(ok.any()):
                new = (torch.where(ok[None, :, None], cand, new[0]), torch.where(ok, c_loss, new[1]),
                       torch.where(ok[None, :, None], c_grad, new[2]), torch.where(ok, c_gmax, new[3]))
                accepted |= ok
            if bool(accepted.all()):
                break
            t = torch.where(accepted, t, t * 0.5)
        stuck = ~accepted  # no decrease at float precision: as converged as it gets
        s_new, y_new = new[0] - phi, new[2] - grad
        phi, loss, grad, gmax = new
        sy = _dot(s_new, y_new)
        S.append(s_new)
        Y.append(y_new)
        R.append(torch.where(sy > 1e-12, 1.0 / sy.clamp_min(1e-12), torch.zeros_like(sy)))
        if len(S) > history:
            S.pop(0), Y.pop(0), R.pop(0)
        n_iter[ids[~done].cpu().numpy()] = it
        now_conv = ~done & (gmax <= gtol)
        converged[ids[now_conv].cpu().numpy()] = True
        done = done | now_conv | stuck
        n_done = int(done.sum())
        if 0 < n_done < len(ids) and n_done >= len(ids) // 4:  # compact the working set
            theta_out[:, ids[done]] = to_theta(phi[:, done], scale[:, done])
            keep = ~done
            ids, phi, loss, grad, gmax = ids[keep], phi[:, keep], loss[keep], grad[:, keep], gmax[keep]
            lam, W, scale = lam[keep], W[:, keep], scale[:, keep]
            Ws = Ws[:, keep] if Ws is not None else None
            S = [v[:, keep] for v in S]
            Y = [v[:, keep] for v in Y]
            R = [r[keep] for r in R]
            done = done[keep]
    theta_out[:, ids] = to_theta(phi, scale)
    return LogRegFit(theta_out, C, n_iter, converged)


def _accuracy(pred: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Accuracies of M prediction rows (M, N) against y (N,), restricted to ``mask`` rows (M, N) if given."""
    correct = pred == np.asarray(y)[None, :]
    if mask is None:
        return correct.mean(1)
    return (correct & mask).sum(1) / mask.sum(1)


def _pct(x: float) -> float:
    """Percent with two decimals (SentEval's ``round(100 * x, 2)``)."""
    return round(100.0 * float(x), 2)


def inner_kfold_eval(
    X: np.ndarray,
    y: np.ndarray,
    k: int = 10,
    l2_grid: tuple[float, ...] = SENTEVAL_L2,
    seed: int = 1111,
    device: str | torch.device | None = None,
    **fit_kwargs,
) -> dict:
    """SentEval's InnerKFoldClassifier protocol (MR, CR, SUBJ, MPQA), all k x (k + 1) x R models in one batch.

    Args:
        X: (N, D) features.
        y: (N,) labels.
        k: outer and inner fold count (SentEval's ``kfold``; 10 in the papers).
        l2_grid: the R candidate penalties.
        seed: seed of the fold assignment.
        device: torch device (default CUDA when available, else CPU).
        **fit_kwargs: passed to :func:`fit_logreg`.

    Returns:
        ``{"acc": mean outer test accuracy (%), "devacc": mean best inner accuracy (%),
        "l2": [chosen penalty per outer fold], "n": N}``.
    """
    y = np.asarray(y, dtype=np.int64)
    N, R = len(y), len(l2_grid)
    outer = stratified_kfold(y, k, seed)
    masks, l2s, evals = [], [], []  # evals: index rows of the held-out samples of each model
    for o in range(k):
        tr = np.flatnonzero(outer != o)
        inner = stratified_kfold(y[tr], k, seed)
        for i in range(k):
            m = np.zeros(N, dtype=bool)
            m[tr[inner != i]] = True
            ev = np.zeros(N, dtype=bool)
            ev[tr[inner == i]] = True
            for reg in l2_grid:
                masks.append(m)
                l2s.append(reg)
                evals.append(ev)
    for o in range(k):
        for reg in l2_grid:
            masks.append(outer != o)
            l2s.append(reg)
            evals.append(outer == o)
    fit = fit_logreg(X, y, np.stack(masks), np.asarray(l2s), int(y.max()) + 1, device=device, **fit_kwargs)
    acc = _accuracy(fit.predict(X), y, np.stack(evals))
    inner_acc = acc[: k * k * R].reshape(k, k, R)
    final_acc = acc[k * k * R:].reshape(k, R)
    dev, test, chosen = [], [], []
    for o in range(k):
        scores = [_pct(inner_acc[o, :, r].mean()) for r in range(R)]
        best = int(np.argmax(scores))
        dev.append(max(scores))
        test.append(_pct(final_acc[o, best]))
        chosen.append(l2_grid[best])
    return {"acc": round(float(np.mean(test)), 2), "devacc": round(float(np.mean(dev)), 2), "l2": chosen,
            "n": N, "not_converged": int((~fit.converged).sum())}


def kfold_eval(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    k: int = 10,
    l2_grid: tuple[float, ...] = SENTEVAL_L2,
    seed: int = 1111,
    device: str | torch.device | None = None,
    **fit_kwargs,
) -> dict:
    """SentEval's KFoldClassifier protocol (TREC, MRPC): k-fold CV on train picks the penalty.

    Args:
        X_train: (N, D) training features; y_train: (N,) labels.
        X_test: (N', D) test features; y_test: (N',) labels.
        k: fold count (10 in the papers).
        l2_grid: the R candidate penalties.
        seed: seed of the fold assignment.
        device: torch device.
        **fit_kwargs: passed to :func:`fit_logreg`.

    Returns:
        ``{"acc": test accuracy (%), "devacc": best CV accuracy (%), "l2": chosen penalty,
        "pred": (N',) test predictions, "n": N, "n_test": N'}``.
    """
    y_train = np.asarray(y_train, dtype=np.int64)
    y_test = np.asarray(y_test, dtype=np.int64)
    R = len(l2_grid)
    folds = stratified_kfold(y_train, k, seed)
    masks, l2s = [], []
    for f in range(k):
        for reg in l2_grid:
            masks.append(folds != f)
            l2s.append(reg)
    for reg in l2_grid:
        masks.append(np.ones(len(y_train), dtype=bool))
        l2s.append(reg)
    C = int(max(y_train.max(), y_test.max())) + 1
    fit = fit_logreg(X_train, y_train, np.stack(masks), np.asarray(l2s), C, device=device, **fit_kwargs)
    held = np.stack(masks[: k * R]) == 0
    cv = _accuracy(fit.predict(X_train)[: k * R], y_train, held).reshape(k, R)
    scores = [_pct(cv[:, r].mean()) for r in range(R)]
    best = int(np.argmax(scores))
    pred = fit.predict(X_test)[k * R + best]
    return {"acc": _pct((pred == y_test).mean()), "devacc": max(scores), "l2": l2_grid[best], "pred": pred,
            "n": len(y_train), "n_test": len(y_test), "not_converged": int((~fit.converged).sum())}


def split_eval(
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_dev: np.ndarray,
    y_dev: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    l2_grid: tuple[float, ...] = SENTEVAL_L2,
    device: str | torch.device | None = None,
    **fit_kwargs,
) -> dict:
    """SentEval's SplitClassifier protocol (SST-2): the dev set picks the penalty.

    Args:
        X_train, y_train: (N, D) training features and (N,) labels.
        X_dev, y_dev: validation features and labels.
        X_test, y_test: test features and labels.
        l2_grid: the candidate penalties.
        device: torch device.
        **fit_kwargs: passed to :func:`fit_logreg`.

    Returns:
        ``{"acc": test accuracy (%), "devacc": best dev accuracy (%), "l2": chosen penalty, ...}``.
    """
    y_train = np.asarray(y_train, dtype=np.int64)
    R = len(l2_grid)
    C = int(max(y_train.max(), np.max(y_dev), np.max(y_test))) + 1
    masks = np.ones((R, len(y_train)), dtype=bool)
    fit = fit_logreg(X_train, y_train, masks, np.asarray(l2_grid), C, device=device, **fit_kwargs)
    scores = [_pct(a) for a in _accuracy(fit.predict(X_dev), y_dev)]
    best = int(np.argmax(scores))
    test = _accuracy(fit.predict(X_test)[best:best + 1], y_test)[0]
    return {"acc": _pct(test), "devacc": max(scores), "l2": l2_grid[best], "n": len(y_train),
            "n_test": len(y_test), "not_converged": int((~fit.converged).sum())}
