"""The whole one-process in-batch loss, plain InfoNCE (SimCSE) or MixCSE, as one autograd Function: the
same numbers as the composed path (:class:`hardmix.losses.ContrastiveLoss` with no strategy or with the
``mixcse`` strategy, and the plain path ``impl="plain"``), in fewer passes over the (B, B) matrices and
with fewer fresh (B, B) allocations.

With unit rows h1 (anchors) and h2 (positives), S = h1 h2^T / tau, d = diag(S), c = lam / (1 - lam) and the
constant (stop-gradient) inverse norms

    inv1_ij = (1 - lam) / ||lam h2_i + (1 - lam) h2_j||,
    inv2_ij = (1 - lam) / ||lam h1_i + (1 - lam) h1_j||,

MixCSE's mixed logits (Zhang et al. 2022, Eq. 4 and 5, in closed form, see
:mod:`hardmix.kernels.mixture_norms`) are

    direction 1 (anchor h1_i, m'_ij = normalize(lam h2_i + (1 - lam) h2_j)):  M1_ij = (S_ij + c d_i) inv1_ij
    direction 2 (anchor h2_i, m_ij  = normalize(lam h1_i + (1 - lam) h1_j)):  M2_ij = (S_ji + c d_i) inv2_ij

for j != i, and each direction's loss is mean_i [log Z_i - d_i] with Z1_i = sum_j e^{S_ij} +
sum_{j != i} e^{M1_ij} and Z2_i = sum_j e^{S_ji} + sum_{j != i} e^{M2_ij}. The bidirectional loss is their
mean. Stop-gradient: M1 passes gradient to h1 only, M2 to h2 only; the plain logits S to both. Without
mixing (plain InfoNCE, ``lam`` None) the M terms are absent.

Gradient (omega = upstream / B, halved when bidirectional; u_i = omega / Z1_i; v_j = omega / Z2_j;
E = e^S; A1 = e^{M1} inv1 and A2^T = e^{M2^T} inv2, diagonals 0):

    dL/dh1 = (E o (u 1^T + 1 v^T) + diag(u) A1) h2 / tau + diag(c u_i rowsum(A1)_i - omega n) h2 / tau
    dL/dh2 = (E o (u 1^T + 1 v^T) + A2^T diag(v))^T h1 / tau + diag(c v_i colsum(A2^T)_i - omega n) h1 / tau

with n the number of directions. Two matrix products, as for plain InfoNCE.

Numerics: every logit is a cosine over tau, so |logit| <= 1 / tau, and the exponentials need no max shift
while 1 / tau is small enough for the dtype (``MAX_INV_TAU``); the caller falls back to the composed path
otherwise. The logits are held in base 2, S log2(e) (the factor rides on the matrix product's scale, and
every mixed logit is linear in S and d), and exponentiated with ``exp2`` (faster than ``exp`` on CPU,
see :data:`hardmix.kernels.block_logsumexp.LOG2_E`), at the same accuracy: the product that computes S log2(e)
rounds as the one that computes S.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from hardmix.kernels.autocast import autocast_free
from hardmix.kernels.block_logsumexp import LOG2_E
from hardmix.kernels.mixture_norms import scaled_inverse_mixture_norms

# Largest 1 / tau for which e^{+-1/tau} and sums of many of them stay finite and normal, per dtype.
MAX_INV_TAU = {torch.float32: 50.0, torch.float64: 500.0}


def fused_in_batch_supported(h1: Tensor, temperature: float) -> bool:
    """Whether :func:`fused_in_batch_loss` handles this input (dtype, temperature, no autocast)."""
    limit = MAX_INV_TAU.get(h1.dtype)
    return limit is not None and 1.0 / temperature <= limit and autocast_free(h1)


def _column_sums(x: Tensor) -> Tensor:
    """(N,) column sums of a row-major (B, N) matrix as a matrix-vector product: on CPU half the time of
    ``x.sum(dim=0)``, which strides across rows."""
    return torch.mv(x.T, x.new_ones(x.shape[0]))


def _forward_buffers(
    h1: Tensor, h2: Tensor, lam: float | None, tau: float, bidirectional: bool
) -> dict[str, Tensor]:
    """The forward quantities that the backward needs (see the module docstring for the names).

    ``lam`` None: plain InfoNCE (no mixed terms). Exponentials in base 2 (see the module docstring)."""
    s = torch.mm(h1 * (LOG2_E / tau), h2.T)  # (B, B) S log2(e)
    d2 = s.diagonal().clone()  # (B,) positive logits, base 2
    d = d2 * (1.0 / LOG2_E)  # (B,) positive logits
    if lam is not None:
        return {"d": d, **_mixed_forward(s, d2, h1, h2, lam, bidirectional)}
    e = s.exp2_()  # E, in the buffer of S
    out = {"d": d, "e": e, "z1": e.sum(dim=1)}
    if bidirectional:
        out["z2"] = _column_sums(e)
    return out


# Rows per strip of the mixed forward on CPU, from B = 8 strips up: the strip's temporaries stay in cache
# between the passes; below that the loop's extra calls cost more than the cache saves (measured in
# docs/performance.md).
_STRIP_ROWS = 128


def _mixed_forward(
    s: Tensor, d: Tensor, h1: Tensor, h2: Tensor, lam: float, bidirectional: bool
) -> dict[str, Tensor]:
    """MixCSE's forward buffers, in three (B, B) matrices: S (becomes E), inv1 (becomes F1 = E + A1) and,
    bidirectional, inv2 (becomes F2 = E + A2^T); plus a scratch of one strip. ``s`` and ``d`` in base 2
    (S log2(e), d log2(e)).

    Every elementwise step of a strip of rows is done while it is in cache (:func:`_mixed_strip`); on CPU
    from B = 1024 up the strips have 128 rows, otherwise the whole matrix is one strip.
    """
    n = s.shape[0]
    cd = d * (lam / (1.0 - lam))  # (B,) c d
    f1 = scaled_inverse_mixture_norms(h2, h2, lam)  # inv1, symmetric; becomes A1, then F1
    f2 = scaled_inverse_mixture_norms(h1, h1, lam) if bidirectional else None  # inv2 -> A2^T -> F2
    rows = _STRIP_ROWS if s.device.type == "cpu" and n >= 8 * _STRIP_ROWS else n
    scratch, ones = s.new_empty(rows, n), s.new_ones(rows)
    if rows == n:
        z1, r1, z2, c2 = _mixed_strip(s, f1, f2, cd, 0, scratch, ones)
    else:
        z1, r1 = s.new_empty(n), s.new_empty(n)
        z2 = c2 = None
        for r0 in range(0, n, rows):
            r1_ = min(r0 + rows, n)
            sums = _mixed_strip(
                s[r0:r1_], f1[r0:r1_], None if f2 is None else f2[r0:r1_], cd, r0,
                scratch[: r1_ - r0], ones[: r1_ - r0],
            )
            z1[r0:r1_], r1[r0:r1_] = sums[0], sums[1]
            if f2 is not None:
                z2 = sums[2] if z2 is None else z2.add_(sums[2])
                c2 = sums[3] if c2 is None else c2.add_(sums[3])
    out = {"e": s, "z1": z1, "r1": r1, "f1": f1}
    if f2 is not None:
        out.update(z2=z2, c2=c2, f2=f2)
    return out


def _mixed_strip(
    s_rows: Tensor, a1: Tensor, a2t: Tensor | None, cd: Tensor, r0: int, t: Tensor, ones: Tensor
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Rows r0 .. r0 + R of the mixed forward, in place: S -> E, inv1 -> F1, inv2 -> F2 (all (R, B) views).

    Direction 1 (rows are the anchors h1_i): e^{M1} = e^{(S + c d 1^T) o inv1} in the scratch ``t``
    (diagonal excluded), its row sums, A1 = e^{M1} o inv1 and its row sums. Direction 2 in the transposed
    layout (column j is the anchor h2_j): e^{(S + c 1 d^T) o inv2}, its column sums, A2^T and its column
    sums. Then E = e^S, its row and column sums, F1 = E + A1 and F2 = E + A2^T. The strip of S is read by
    both directions before it is exponentiated. ``s_rows`` and ``cd`` are in base 2 (times log2(e)), so
    every exponential is an ``exp2``.

    Returns:
        The strip's Z1 and rowsum(A1) (R,), and its contributions (B,) to Z2 and colsum(A2^T) (None when
        single-direction).
    """
    rows = s_rows.shape[0]
    torch.add(s_rows, cd[r0 : r0 + rows].unsqueeze(1), out=t).mul_(a1).exp2_()
    t[:, r0 : r0 + rows].diagonal().zero_()
    z1m = t.sum(dim=1)
    r1 = a1.mul_(t).sum(dim=1)
    z2 = c2 = None
    if a2t is not None:
        torch.add(s_rows, cd.unsqueeze(0), out=t).mul_(a2t).exp2_()
        t[:, r0 : r0 + rows].diagonal().zero_()
        z2 = torch.mv(t.T, ones)
        c2 = torch.mv(a2t.mul_(t).T, ones)
    e = s_rows.exp2_()  # E, in the buffer of S
    z1 = e.sum(dim=1).add_(z1m)
    a1.add_(e)  # F1 = E + A1
    if a2t is not None:
        z2.addmv_(e.T, ones)
        a2t.add_(e)  # F2 = E + A2^T
    return z1, r1, z2, c2


class _FusedInBatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h1: Tensor, h2: Tensor, lam: float | None, tau: float, bidirectional: bool):  # type: ignore[override]
        buffers = _forward_buffers(h1, h2, lam, tau, bidirectional)
        d = buffers["d"]
        loss = (buffers["z1"].log() - d).mean()
        if bidirectional:
            loss = 0.5 * (loss + (buffers["z2"].log() - d).mean())
        ctx.save_for_backward(h1, h2)
        ctx.buffers = buffers
        ctx.args = (lam, tau, bidirectional)
        ctx.mark_non_differentiable(d)
        return loss, d

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: Tensor | None, _grad_d: Tensor | None):  # type: ignore[override]
        h1, h2 = ctx.saved_tensors
        lam, tau, bidirectional = ctx.args
        if grad_loss is None:
            return None, None, None, None, None
        # The backward works in place on the saved buffers; a second backward (retain_graph) recomputes them.
        buffers = ctx.buffers
        if buffers is None:
            buffers = _forward_buffers(h1, h2, lam, tau, bidirectional)
        ctx.buffers = None
        n_dir = 2 if bidirectional else 1
        omega = grad_loss.to(h1.dtype) / (h1.shape[0] * n_dir)
        e = buffers["e"]
        u = omega / buffers["z1"]  # (B,)
        v = omega / buffers["z2"] if bidirectional else None
        if lam is None:  # plain InfoNCE: one matrix E o (u 1^T + 1 v^T) for both inputs
            if bidirectional:
                g_a = torch.mul(e, v.unsqueeze(0)).addcmul_(e, u.unsqueeze(1))
            else:
                g_a = e.mul_(u.unsqueeze(1))
            g_a.diagonal().sub_(omega * n_dir)
            g_b = g_a
        else:
            c = lam / (1.0 - lam)
            f1 = buffers["f1"]
            if bidirectional:
                g_a = f1.mul_(u.unsqueeze(1)).addcmul_(e, v.unsqueeze(0))
                g_b = buffers["f2"].mul_(v.unsqueeze(0)).addcmul_(e, u.unsqueeze(1))
                g_b.diagonal().add_(c * v * buffers["c2"] - omega * n_dir)
            else:
                g_a = f1.mul_(u.unsqueeze(1))
                g_b = e.mul_(u.unsqueeze(1))
                g_b.diagonal().sub_(omega)
            g_a.diagonal().add_(c * u * buffers["r1"] - omega * n_dir)
        grad_h1 = torch.mm(g_a, h2).mul_(1.0 / tau) if ctx.needs_input_grad[0] else None
        grad_h2 = torch.mm(g_b.T, h1).mul_(1.0 / tau) if ctx.needs_input_grad[1] else None
        return grad_h1, grad_h2, None, None, None


def fused_in_batch_loss(
    h1: Tensor, h2: Tensor, temperature: float, bidirectional: bool, lam: float | None = None
) -> tuple[Tensor, Tensor]:
    """In-batch InfoNCE for one process, plain or with MixCSE's stop-gradient mixtures (the paper's setting).

    Args:
        h1: (B, D) unit-norm anchors (first view).
        h2: (B, D) unit-norm positives (second view).
        lam: weight of the positive in each mixture, in (0, 1); None: plain InfoNCE (SimCSE), the same
            loss without the mixed terms.
        temperature: tau; ``1 / tau`` at most ``MAX_INV_TAU[dtype]`` (see :func:`fused_in_batch_supported`).
        bidirectional: average the h2-anchored direction in (the paper's loss); False is "single".

    Returns:
        The scalar loss and the (B,) positive logits ``h1_i . h2_i / tau`` (no gradient).

    Example:
        >>> import torch.nn.functional as F
        >>> h1, h2 = F.normalize(torch.randn(8, 16), dim=1), F.normalize(torch.randn(8, 16), dim=1)
        >>> loss, pos = fused_in_batch_loss(h1, h2, temperature=0.05, bidirectional=True, lam=0.2)
        >>> loss.shape, pos.shape
        (torch.Size([]), torch.Size([8]))
    """
    lam = None if lam is None else float(lam)
    return _FusedInBatch.apply(h1, h2, lam, float(temperature), bool(bidirectional))
