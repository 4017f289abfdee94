"""SentEval's logistic-regression classifier, many members trained at once as one batched model.

SentEval (``senteval/tools/classifier.py``, class ``MLP`` with ``nhid`` 0) trains one ``nn.Linear(D, C)``
at a time: cross-entropy averaged over mini-batches of 64, Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8)
with ``weight_decay`` l2 (an L2 term ``l2 * theta`` added to the gradient of the weights and the bias),
``epoch_size`` 4 passes over the training data between two checks of the validation accuracy, the best
model so far kept, training stopped at the first check that fails to improve once ``tenacity`` 5 checks
have failed in all (failures are counted over the whole run, not reset by an improvement), or once the
epoch counter exceeds ``max_epoch`` 200. Every classifier re-seeds numpy and torch with its seed (1111):
all start from the same initial weights (``nn.Linear``'s default initialisation drawn right after
``torch.manual_seed``), and each pass shuffles with ``np.random.permutation`` from a numpy stream that
starts at the seed (after the draw of the validation split, when the validation data is split off).

:func:`train_members` trains M such classifiers (the members: each with its own training rows,
validation rows, L2 value and shuffle stream, all on the same feature matrix) in lockstep: one step
advances every member on its own next mini-batch, with per-member Adam state and step counts; a member
whose pass is shorter waits for the others at the end of the pass; each member's validation check, best
model and early stopping are its own. Members that differ only in their L2 value share their
mini-batches (a group: one gather, one product for the group's members); a group leaves the batch once
all its members have stopped. The members' mini-batches
are SentEval's own (the same numpy permutations), so each member follows the trajectory its one-at-a-time
SentEval training would follow, up to float rounding (batched products sum in another order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch


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


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's classifier settings (its defaults, and the papers' ``classifier`` dict).

    Attributes:
        batch_size: mini-batch size (64).
        epoch_size: passes over the training data between two validation checks (4).
        tenacity: validation checks that may fail to improve, in all, before training stops (5).
        max_epoch: training continues while the pass counter is at most this (200).
        lr: Adam learning rate (1e-3, torch's default, which SentEval's ``"adam"`` uses).
        betas: Adam betas.
        eps: Adam epsilon.
        seed: the seed every classifier starts its numpy and torch generators from (1111).
    """

    batch_size: int = 64
    epoch_size: int = 4
    tenacity: int = 5
    max_epoch: int = 200
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    seed: int = 1111


@dataclass
class Member:
    """One classifier of a batch.

    Attributes:
        train: (n,) int64 rows of the feature matrix it trains on, in the order SentEval's classifier holds
            them (the order its permutations index).
        val: (v,) int64 rows it checks its accuracy on (early stopping and model selection).
        l2: Adam weight decay.
        split_draw: length of the permutation its numpy stream drew first to split off the validation
            rows (``validation_split``), or 0 when the validation data was given.
    """

    train: np.ndarray
    val: np.ndarray
    l2: float
    split_draw: int = 0


@dataclass
class MemberFit:
    """The best models of M trained members.

    Attributes:
        weight: (M, C, D) float32 weights of each member's best model.
        bias: (M, C) float32 biases.
        best_correct: (M,) validation samples right at the best check.
        n_val: (M,) validation samples.
        best_epoch: (M,) the pass counter at the best check.
        stop_epoch: (M,) the pass counter when the member stopped.
        steps: (M,) Adam steps each member made (its passes x its batches per pass).
    """

    weight: torch.Tensor
    bias: torch.Tensor
    best_correct: np.ndarray
    n_val: np.ndarray
    best_epoch: np.ndarray
    stop_epoch: np.ndarray
    steps: np.ndarray

    def val_accuracy(self) -> np.ndarray:
        """(M,) best validation accuracy in [0, 1], as SentEval's ``fit`` returns it (correct / n)."""
        return self.best_correct / self.n_val

    def predict(self, X: np.ndarray | torch.Tensor, members: np.ndarray | None = None) -> np.ndarray:
        """Predicted classes (argmax of the logits) of some members.

        Args:
            X: (N, D) features.
            members: (K,) member indices (default: all).

        Returns:
            (K, N) int64.
        """
        W, b = self.weight, self.bias
        if members is not None:
            idx = torch.as_tensor(np.asarray(members), device=W.device)
            W, b = W[idx], b[idx]
        X = torch.as_tensor(np.asarray(X), dtype=W.dtype, device=W.device)
        z = torch.einsum("nd,mcd->mnc", X, W) + b[:, None, :]
        return z.argmax(-1).cpu().numpy()


def initial_linear(dim: int, n_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The parameters SentEval's classifier starts from: ``nn.Linear(dim, n_classes)`` made right after
    ``torch.manual_seed(seed)`` (the global torch generator is left as it was).

    Returns:
        (weight (C, D), bias (C,)) float32 on the CPU.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lin = torch.nn.Linear(dim, n_classes)
    return lin.weight.detach().clone(), lin.bias.detach().clone()


def _groups(members: list[Member]) -> list[list[int]]:
    """Members with the same training rows, validation rows and shuffle stream (they differ in their L2
    value only) see the same mini-batches: they form a group. Groups keep the members' order."""
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(members):
        key = (m.split_draw, len(m.train), m.train.tobytes(), m.val.tobytes())
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def train_members(
    X: np.ndarray | torch.Tensor,
    y: np.ndarray,
    members: list[Member],
    n_classes: int,
    config: ClassifierConfig = ClassifierConfig(),
    device: str | torch.device | None = None,
) -> MemberFit:
    """Train M SentEval classifiers on shared features at once, each with its own early stopping.

    Members that differ in their L2 value only (same training and validation rows and shuffle stream)
    form a group: a group's mini-batch is gathered once and its K members' logits are one product,
    ``(B, D + 1) @ (D + 1, K C)``. A stopped member's parameters keep training with its group (its
    result is frozen at its best check and its later checks are ignored); a group leaves the batch when
    all its members have stopped.

    Args:
        X: (N, D) features (float32 is what SentEval trains on).
        y: (N,) int64 labels in [0, C).
        members: the M classifiers (each with a non-empty training and validation set).
        n_classes: C.
        config: SentEval's classifier settings.
        device: torch device (default: CUDA when available, else CPU).

    Returns:
        Each member's best model and its validation record (:class:`MemberFit`).
    """
    if not members or any(len(m.train) == 0 or len(m.val) == 0 for m in members):
        raise ValueError("train_members: every member needs a non-empty training and validation set")
    device = torch.device(device) if device is not None else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    # the steps are many small ops: on the CPU one thread is fastest (more spin and wait on a busy machine)
    with _cpu_threads(1 if device.type == "cpu" else None):
        fits = []
        groups = _groups(members)
        by_size: dict[int, list[list[int]]] = {}
        for g in groups:  # a batch needs groups of one size K
            by_size.setdefault(len(g), []).append(g)
        order: list[int] = []
        for part in by_size.values():
            fits.append(_train(X, y, members, part, n_classes, config, device))
            order += [i for g in part for i in g]
        return _merge(fits, np.argsort(np.asarray(order)))


def _merge(fits: list[MemberFit], inverse: np.ndarray) -> MemberFit:
    """Concatenate fits (members in the given concatenated order) and restore the members' order."""
    if len(fits) == 1 and np.array_equal(inverse, np.arange(len(inverse))):
        return fits[0]
    idx = torch.as_tensor(inverse, device=fits[0].weight.device)
    cat = lambda name: np.concatenate([getattr(f, name) for f in fits])[inverse]  # noqa: E731
    return MemberFit(torch.cat([f.weight for f in fits])[idx], torch.cat([f.bias for f in fits])[idx],
                     cat("best_correct"), cat("n_val"), cat("best_epoch"), cat("stop_epoch"), cat("steps"))


def _train(X: np.ndarray | torch.Tensor, y: np.ndarray, members: list[Member], groups: list[list[int]],
           n_classes: int, config: ClassifierConfig, device: torch.device) -> MemberFit:
    """:func:`train_members`'s loop for G groups of K members each (returned in group order)."""
    G, K, C, bs = len(groups), len(groups[0]), int(n_classes), config.batch_size
    beta1, beta2 = config.betas
    lead = [members[g[0]] for g in groups]  # a group's rows and stream
    X_np = X.detach().cpu().numpy() if torch.is_tensor(X) else np.asarray(X)
    Xa = torch.as_tensor(np.concatenate([X_np.astype(np.float32), np.ones((len(X_np), 1), np.float32)], 1),
                         device=device)  # (N, D + 1): the bias is the last weight
    N, D1 = Xa.shape
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64), device=device)
    onehot = torch.nn.functional.one_hot(yt, C).to(torch.float32)  # (N, C)

    # theta: (G, D + 1, K C), member (g, k)'s class c in column k C + c
    w0, b0 = initial_linear(D1 - 1, C, config.seed)
    theta0 = torch.cat([w0, b0[:, None]], 1).T.to(device)  # (D + 1, C)
    theta = theta0.repeat(1, K)[None].repeat(G, 1, 1)
    m1, m2 = torch.zeros_like(theta), torch.zeros_like(theta)
    l2_np = np.array([[members[i].l2 for i in g] for g in groups], dtype=np.float32)  # (G, K)
    l2 = torch.as_tensor(np.repeat(l2_np, C, axis=1), device=device)[:, None, :]  # (G, 1, K C)

    val_rows = np.unique(np.concatenate([m.val for m in lead]))
    val_mask_np = np.zeros((G, len(val_rows)), dtype=bool)
    for j, m in enumerate(lead):
        val_mask_np[j, np.searchsorted(val_rows, m.val)] = True
    val_mask = torch.as_tensor(val_mask_np, device=device)
    vr = torch.as_tensor(val_rows, device=device)
    Xv, yv = Xa[vr], yt[vr]

    M = G * K
    best = theta.clone()  # each member's columns at its best check
    best_correct = np.full((G, K), -1, dtype=np.int64)
    best_epoch = np.zeros((G, K), dtype=np.int64)
    stop_epoch = np.zeros((G, K), dtype=np.int64)
    fails = np.zeros((G, K), dtype=np.int64)
    stopped = np.zeros((G, K), dtype=bool)
    sizes = np.array([len(m.train) for m in lead])
    steps = np.zeros(G, dtype=np.int64)  # Adam steps of each group's members
    streams = _Streams(lead, config.seed)

    active = np.arange(G)  # groups with a member still training; theta, m1, m2, l2 are compacted to them
    nepoch = 0
    while len(active) and nepoch <= config.max_epoch:
        n_act = sizes[active]
        n_max, n_min = int(n_act.max()), int(n_act.min())
        for _ in range(config.epoch_size):
            perms = streams.next_pass()
            rows_np = np.zeros((len(active), n_max), dtype=np.int64)
            for j, g in enumerate(active):
                rows_np[j, :sizes[g]] = lead[g].train[perms[streams.keys[g]]]
            rows = torch.as_tensor(rows_np, device=device)
            for start in range(0, n_max, bs):
                if start + bs <= n_min:  # every group has a full batch
                    sub, take = None, None
                else:  # the end of a pass: partial batches, and groups whose pass is over wait
                    sub = np.flatnonzero(n_act > start)
                    take = np.minimum(n_act[sub] - start, bs)
                t = steps[active if sub is None else active[sub]] + 1
                _adam_step(Xa, onehot, rows, start, sub, take, theta, m1, m2, l2, t, K, C, config)
                steps[active if sub is None else active[sub]] = t
        nepoch += config.epoch_size
        # validation check, per member
        z = torch.einsum("ud,gdk->guk", Xv, theta).view(len(active), len(val_rows), K, C)
        mask = val_mask[torch.as_tensor(active, device=device)][..., None]  # (A, U, 1)
        hit = (z.argmax(-1) == yv[None, :, None]) & mask
        correct = hit.sum(1).cpu().numpy()  # (A, K)
        live = ~stopped[active]
        better = (correct > best_correct[active]) & live
        if better.any():
            rows_b, cols_b = np.nonzero(better)
            cols_t = torch.as_tensor(cols_b[:, None] * C + np.arange(C)[None], device=device)  # (n, C)
            src = theta[torch.as_tensor(rows_b, device=device)]  # (n, D + 1, K C)
            picked = torch.gather(src, 2, cols_t[:, None, :].expand(-1, D1, -1))
            g_idx = torch.as_tensor(active[rows_b], device=device)
            for c in range(C):
                best[g_idx, :, cols_t[:, c]] = picked[:, :, c]
            best_correct[active[rows_b], cols_b] = correct[better]
            best_epoch[active[rows_b], cols_b] = nepoch
        worse = live & ~better
        a_w, k_w = np.nonzero(worse)
        g_w = active[a_w]
        newly = fails[g_w, k_w] >= config.tenacity
        stopped[g_w[newly], k_w[newly]] = True
        fails[g_w, k_w] += 1
        a_l, k_l = np.nonzero(live)
        stop_epoch[active[a_l], k_l] = nepoch
        done = stopped[active].all(1)
        if done.any():
            keep = torch.as_tensor(np.flatnonzero(~done), device=device)
            theta, m1, m2, l2 = theta[keep], m1[keep], m2[keep], l2[keep]
            active = active[~done]
    # back to members: (G, D + 1, K C) -> (G K, C, D) weights and (G K, C) biases
    best = best.view(G, D1, K, C).permute(0, 2, 3, 1).reshape(M, C, D1)
    n_val = np.repeat([len(m.val) for m in lead], K)
    steps_done = (stop_epoch * -(-sizes[:, None] // bs)).ravel()
    return MemberFit(best[..., :-1].contiguous(), best[..., -1].contiguous(), best_correct.ravel(), n_val,
                     best_epoch.ravel(), stop_epoch.ravel(), steps_done)


class _Streams:
    """The numpy shuffle streams of the groups: one ``RandomState(seed)`` per distinct (split draw, n),
    since classifiers with the same history draw the same permutations."""

    def __init__(self, members: list[Member], seed: int) -> None:
        self.keys = [(m.split_draw, len(m.train)) for m in members]
        self.rng: dict[tuple[int, int], np.random.RandomState] = {}
        for key in dict.fromkeys(self.keys):
            rng = np.random.RandomState(seed)
            if key[0]:
                rng.permutation(key[0])
            self.rng[key] = rng

    def next_pass(self) -> dict[tuple[int, int], np.ndarray]:
        """One pass's permutation for every stream (each stream draws once per pass, used or not)."""
        return {key: rng.permutation(key[1]) for key, rng in self.rng.items()}


def _adam_step(
    Xa: torch.Tensor,
    onehot: torch.Tensor,
    rows: torch.Tensor,
    start: int,
    sub: np.ndarray | None,
    take: np.ndarray | None,
    theta: torch.Tensor,
    m1: torch.Tensor,
    m2: torch.Tensor,
    l2: torch.Tensor,
    t: np.ndarray,
    K: int,
    C: int,
    config: ClassifierConfig,
) -> None:
    """One mini-batch Adam step of the active groups (or of ``sub`` of them), in place.

    Args:
        Xa: (N, D + 1) features with a ones column; onehot: (N, C) one-hot labels.
        rows: (A, n_max) this pass's rows of each active group, in batch order.
        start: the batch's first position in the pass.
        sub: (S,) positions of the stepping groups among the active ones, or None for all (full batches).
        take: (S,) their batch sizes (None: ``config.batch_size`` for all).
        theta, m1, m2: (A, D + 1, K C) parameters and Adam moments; l2: (A, 1, K C) weight decays.
        t: (A,) or (S,) Adam step counts after this step.
        K, C: members per group, classes.
        config: Adam's settings.
    """
    bs = config.batch_size
    beta1, beta2 = config.betas
    dev = Xa.device
    if sub is None:
        idx = rows[:, start:start + bs]  # (A, B)
        th, mm, vv, lam = theta, m1, m2, l2
    else:
        s_t = torch.as_tensor(sub, device=dev)
        idx = rows[s_t, start:start + bs]
        th, mm, vv, lam = theta[s_t], m1[s_t], m2[s_t], l2[s_t]
    Xb = Xa[idx]  # (S, B, D + 1)
    S, B = idx.shape
    z = torch.bmm(Xb, th).view(S, B, K, C)
    # softmax written out: torch.softmax over a last axis of 2 to 6 classes is several times slower on CPUs
    g = (z - z.amax(-1, keepdim=True)).exp_()
    g.div_(g.sum(-1, keepdim=True)).sub_(onehot[idx][:, :, None, :])  # d CE / dz
    if take is None:
        g.mul_(1.0 / bs)  # the batch mean
    else:
        tk = torch.as_tensor(take, device=dev, dtype=torch.float32)
        w = (torch.arange(B, device=dev)[None] < tk[:, None]).to(torch.float32) / tk[:, None]
        g.mul_(w[:, :, None, None])  # zero on padding
    grad = torch.bmm(Xb.transpose(1, 2), g.view(S, B, K * C)).addcmul_(lam, th)  # + weight decay
    # in place: the full tensors, or the subset's copies (advanced indexing copies), written back below
    mm.mul_(beta1).add_(grad, alpha=1 - beta1)
    vv.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    if np.all(t == t[0]):
        c1, c2 = 1 - beta1 ** int(t[0]), (1 - beta2 ** int(t[0])) ** 0.5
        denom = vv.sqrt().div_(c2).add_(config.eps)
        if sub is None:
            theta.addcdiv_(mm, denom, value=-config.lr / c1)
            return
        new = th.addcdiv(mm, denom, value=-config.lr / c1)
    else:
        c1 = torch.as_tensor(1 - beta1 ** t.astype(np.float64), dtype=torch.float32, device=dev)
        c2 = torch.as_tensor(np.sqrt(1 - beta2 ** t.astype(np.float64)), dtype=torch.float32, device=dev)
        denom = vv.sqrt().div_(c2[:, None, None]).add_(config.eps)
        new = th - mm.div(denom).mul_((config.lr / c1)[:, None, None])
        if sub is None:
            theta.copy_(new)
            return
    m1[s_t], m2[s_t], theta[s_t] = mm, vv, new
