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
model and early stopping are its own, and a stopped member leaves the batch. The members' mini-batches
are SentEval's own (the same numpy permutations), so each member follows the trajectory its one-at-a-time
SentEval training would follow, up to float rounding (batched products sum in another order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hardmix.text.transfer import _cpu_threads


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
    """

    weight: torch.Tensor
    bias: torch.Tensor
    best_correct: np.ndarray
    n_val: np.ndarray
    best_epoch: np.ndarray
    stop_epoch: np.ndarray

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


class _Streams:
    """The numpy shuffle streams of the members: one ``RandomState(seed)`` per distinct (split draw, n),
    since members with the same history draw the same permutations."""

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


def train_members(
    X: np.ndarray | torch.Tensor,
    y: np.ndarray,
    members: list[Member],
    n_classes: int,
    config: ClassifierConfig = ClassifierConfig(),
    device: str | torch.device | None = None,
) -> MemberFit:
    """Train M SentEval classifiers on shared features at once, each with its own early stopping.

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
        return _train(X, y, members, n_classes, config, device)


def _train(X: np.ndarray | torch.Tensor, y: np.ndarray, members: list[Member], n_classes: int,
           config: ClassifierConfig, device: torch.device) -> MemberFit:
    """:func:`train_members`'s loop (arguments checked, device resolved)."""
    Xt = torch.as_tensor(np.asarray(X), dtype=torch.float32, device=device)
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64), device=device)
    M, D, C, bs = len(members), Xt.shape[1], int(n_classes), config.batch_size
    beta1, beta2 = config.betas

    w0, b0 = initial_linear(D, C, config.seed)
    W = w0.to(device).expand(M, C, D).clone()
    b = b0.to(device).expand(M, C).clone()
    mW, vW, mb, vb = torch.zeros_like(W), torch.zeros_like(W), torch.zeros_like(b), torch.zeros_like(b)
    steps = torch.zeros(M, dtype=torch.float32, device=device)
    l2 = torch.tensor([m.l2 for m in members], dtype=torch.float32, device=device)

    # validation: the union of the members' rows, with a (M, U) membership mask
    val_rows = np.unique(np.concatenate([m.val for m in members]))
    pos = np.searchsorted(val_rows, np.concatenate([m.val for m in members]))
    owner = np.repeat(np.arange(M), [len(m.val) for m in members])
    val_mask_np = np.zeros((M, len(val_rows)), dtype=bool)
    val_mask_np[owner, pos] = True
    val_mask = torch.as_tensor(val_mask_np, device=device)
    Xv, yv = Xt[torch.as_tensor(val_rows, device=device)], yt[torch.as_tensor(val_rows, device=device)]

    best_W, best_b = W.clone(), b.clone()
    best_correct = np.full(M, -1, dtype=np.int64)
    best_epoch = np.zeros(M, dtype=np.int64)
    stop_epoch = np.zeros(M, dtype=np.int64)
    fails = np.zeros(M, dtype=np.int64)
    streams = _Streams(members, config.seed)
    sizes = np.array([len(m.train) for m in members])

    active = np.arange(M)  # members still training; W, b, Adam state, l2, steps are compacted to them
    nepoch = 0
    while len(active) and nepoch <= config.max_epoch:
        n_act = sizes[active]
        n_max = int(n_act.max())
        for _ in range(config.epoch_size):
            perms = streams.next_pass()
            rows_np = np.zeros((len(active), n_max), dtype=np.int64)
            for j, i in enumerate(active):
                rows_np[j, :sizes[i]] = members[i].train[perms[streams.keys[i]]]
            rows = torch.as_tensor(rows_np, device=device)
            n_t = torch.as_tensor(n_act, device=device)
            for start in range(0, n_max, bs):
                take = (n_t - start).clamp(0, bs)  # (A,) this step's batch size per member
                if bool((take == 0).any()):  # members whose pass has ended wait
                    sub = torch.nonzero(take > 0)[:, 0]
                else:
                    sub = None
                idx = rows[:, start:start + bs] if sub is None else rows[sub, start:start + bs]
                tk = take if sub is None else take[sub]
                _adam_step(Xt, yt, idx, tk, W, b, mW, vW, mb, vb, steps, l2, sub, config, beta1, beta2)
        nepoch += config.epoch_size
        # validation check, per member
        z = torch.einsum("nd,acd->anc", Xv, W) + b[:, None, :]
        correct = ((z.argmax(-1) == yv[None]) & val_mask[torch.as_tensor(active, device=device)]).sum(1)
        correct = correct.cpu().numpy()
        better = correct > best_correct[active]
        if better.any():
            sel = torch.as_tensor(np.flatnonzero(better), device=device)
            ids = torch.as_tensor(active[better], device=device)
            best_W[ids], best_b[ids] = W[sel], b[sel]
            best_correct[active[better]] = correct[better]
            best_epoch[active[better]] = nepoch
        worse = active[~better]
        stop = worse[fails[worse] >= config.tenacity]
        fails[worse] += 1
        stop_epoch[active] = nepoch
        if len(stop):
            keep_np = ~np.isin(active, stop)
            keep = torch.as_tensor(np.flatnonzero(keep_np), device=device)
            W, b, mW, vW, mb, vb, steps, l2 = (t[keep] for t in (W, b, mW, vW, mb, vb, steps, l2))
            active = active[keep_np]
    n_val = np.array([len(m.val) for m in members])
    return MemberFit(best_W, best_b, best_correct, n_val, best_epoch, stop_epoch)


def _adam_step(
    X: torch.Tensor,
    y: torch.Tensor,
    idx: torch.Tensor,
    take: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor,
    mW: torch.Tensor,
    vW: torch.Tensor,
    mb: torch.Tensor,
    vb: torch.Tensor,
    steps: torch.Tensor,
    l2: torch.Tensor,
    sub: torch.Tensor | None,
    config: ClassifierConfig,
    beta1: float,
    beta2: float,
) -> None:
    """One mini-batch Adam step of the members ``sub`` (all when None), in place.

    Args:
        X: (N, D) features; y: (N,) labels.
        idx: (K, B) rows of each stepping member's batch (entries past ``take`` are padding).
        take: (K,) batch sizes (>= 1).
        W, b: (A, C, D), (A, C) parameters of the active members; mW, vW, mb, vb: their Adam moments;
            steps: (A,) their Adam step counts; l2: (A,) their weight decays.
        sub: (K,) positions in the active members of the stepping ones, or None for all.
        config, beta1, beta2: Adam's settings.
    """
    sel = (lambda t: t) if sub is None else (lambda t: t[sub])
    Wk, bk = sel(W), sel(b)
    Xb = X[idx]  # (K, B, D)
    z = torch.baddbmm(bk[:, None, :], Xb, Wk.transpose(1, 2))  # (K, B, C)
    g = torch.softmax(z, dim=-1)
    g.scatter_add_(-1, y[idx][..., None], torch.full_like(g[..., :1], -1.0))
    B = idx.shape[1]
    weight = (torch.arange(B, device=X.device)[None] < take[:, None]).to(g.dtype) / take[:, None].to(g.dtype)
    g.mul_(weight[..., None])  # d(mean cross-entropy)/dz, zero on padding
    l2k = sel(l2)
    gW = torch.bmm(g.transpose(1, 2), Xb).add_(l2k[:, None, None] * Wk)  # weight decay as in torch's Adam
    gb = g.sum(1).add_(l2k[:, None] * bk)
    t = sel(steps) + 1
    c1 = (1 - beta1 ** t.double()).float()  # bias corrections in double, as torch's Adam (Python floats)
    c2 = (1 - beta2 ** t.double()).sqrt().float()
    for p, m, v, grad, shape in ((W, mW, vW, gW, (-1, 1, 1)), (b, mb, vb, gb, (-1, 1))):
        mk = sel(m).mul(beta1).add_(grad, alpha=1 - beta1)
        vk = sel(v).mul(beta2).addcmul_(grad, grad, value=1 - beta2)
        upd = (mk / (vk.sqrt() / c2.view(shape)).add_(config.eps)) * (config.lr / c1).view(shape)
        if sub is None:
            m.copy_(mk)
            v.copy_(vk)
            p.sub_(upd)
        else:
            m[sub], v[sub] = mk, vk
            p[sub] = sel(p) - upd
    if sub is None:
        steps.add_(1)
    else:
        steps[sub] = t
