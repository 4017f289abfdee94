"""MoCHi's synthetic logits in closed form, as gathered logits of the queue block (the fast path of
:class:`hardmix.strategies.MoCHi`; its plain path builds the points, and the tests check both agree)."""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.kernels.gathered_logits import GatheredLogits
from hardmix.kernels.mixture_norms import inverse_mixture_norm, pair_inverse_norms


def mochi_logits(
    anchor_logits: Tensor,
    anchors: Tensor,
    negatives: Tensor,
    hard: Tensor,
    draws: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    anchor_similarities: Tensor,
    temperature: float,
    to_cosine: float = 1.0,
) -> GatheredLogits:
    """MoCHi's synthetic logits ``q . SG(h) / tau`` in closed form, without building the points.

    For unit q and unit negatives, with h = normalize(alpha n_a + (1 - alpha) n_b) and
    h' = normalize(beta SG(q) + (1 - beta) n_c):

        q . h  = (alpha q.n_a + (1 - alpha) q.n_b) / ||alpha n_a + (1 - alpha) n_b||
        q . h' = (beta q.SG(q) + (1 - beta) q.n_c) / ||beta q + (1 - beta) n_c||,
        ||w a + (1 - w) b||^2 = w^2 + (1 - w)^2 + 2 w (1 - w) a.b.

    The norms are constants, so each logit is a weighted sum of entries of ``anchor_logits`` (their
    gradient reaches q only, as through SG(h)) plus, for h', the direct term beta q.SG(q) / tau / norm:
    a :class:`~hardmix.kernels.gathered_logits.GatheredLogits` on the support ``hard`` (pair columns
    gather [n_a, n_b], query columns [n_c, n_c] with weights [(1 - beta) / norm, 0]). Only
    ||alpha n_a + (1 - alpha) n_b|| needs the vectors (one inner product per pair,
    :func:`~hardmix.kernels.mixture_norms.pair_inverse_norms`). Equal to
    building the points and a batched product (:meth:`hardmix.strategies.MoCHi.extra_logits`) up to
    rounding, with the same draws.

    Args:
        anchor_logits: (B, K) q . n / tau with gradient to the anchors only.
        anchors: (B, D) unit queries (with gradient).
        negatives: (K, D) unit negatives.
        hard: (B, N) indices of each query's hardest negatives.
        draws: ``(first, second, alpha, pick, beta)``: the pair positions among ``hard`` (B, s) twice,
            alpha (B, s), the query mixtures' positions (B, s') and beta (B, s')
            (:func:`hardmix.strategies.mochi.mochi_draws`).
        anchor_similarities: (B, K) fp32 similarities q . n (no gradient), for the query mixtures' norms.
        temperature: tau.
        to_cosine: factor turning ``anchor_similarities`` into cosines (tau when they are logits).

    Returns:
        (B, s + s') gathered logits of ``anchor_logits``, pair mixtures first.
    """
    first, second, alpha, pick, beta = draws
    batch, s, s_q = hard.shape[0], first.shape[1], pick.shape[1]
    with torch.no_grad():
        # Term j of every synthetic point, as positions among the hard negatives: j = 0 [a | c],
        # j = 1 [b | c] (weight 0); the logits gather them through ``support=hard``.
        positions = torch.empty(batch, 2, s + s_q, dtype=torch.long, device=hard.device)
        positions[:, 0, :s], positions[:, 1, :s] = first, second
        positions[:, :, s:] = pick.unsqueeze(1)
        dtype = torch.promote_types(negatives.dtype, anchor_similarities.dtype)
        dtype = torch.promote_types(dtype, torch.float32)
        weight = torch.empty(batch, 2, s + s_q, dtype=dtype, device=hard.device)
        if s > 0:  # rows of the negatives n_a, n_b: (B, s) each
            rows_a, rows_b = hard.gather(1, positions[:, 0, :s]), hard.gather(1, positions[:, 1, :s])
            inv = pair_inverse_norms(negatives.detach(), rows_a, rows_b, alpha)
            a = alpha.to(inv.dtype)
            torch.mul(a, inv, out=weight[:, 0, :s])
            torch.mul(1.0 - a, inv, out=weight[:, 1, :s])
        if s_q > 0:
            cos_qc = anchor_similarities.gather(1, hard.gather(1, positions[:, 0, s:]))
            cos_qc = cos_qc.to(torch.promote_types(cos_qc.dtype, torch.float32)).mul_(to_cosine)
            b = beta.to(cos_qc.dtype)
            inv_q = inverse_mixture_norm(cos_qc, b)
            torch.mul(1.0 - b, inv_q, out=weight[:, 0, s:])
            weight[:, 1, s:] = 0.0
    direct = None
    if s_q > 0:
        self_logit = (anchors * anchors.detach()).sum(dim=1, keepdim=True) / temperature  # q . SG(q) / tau
        query_part = self_logit.to(anchor_logits.dtype) * (b * inv_q).to(anchor_logits.dtype)
        direct = torch.cat([query_part.new_zeros(batch, s), query_part], dim=1) if s > 0 else query_part
    return GatheredLogits(anchor_logits, positions, weight, direct, support=hard)

