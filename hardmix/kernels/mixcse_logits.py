"""MixCSE's mixed logits in closed form (the fast path of :class:`hardmix.strategies.MixCSE`; its plain path
builds the mixtures, and the tests check both agree).

With anchor h_i, positive p_i, candidates n_j and m_ij = normalize(lam p_i + (1 - lam) n_j) (Zhang et al.
2022, Eq. 4), ``h_i . m_ij / tau = (h_i.n_j / tau + lam / (1 - lam) h_i.p_i / tau) (1 - lam) / ||lam p_i +
(1 - lam) n_j||``: the logits the loss has already, shifted per row and rescaled by constant inverse norms
(:mod:`hardmix.kernels.mixture_norms`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.kernels.mixture_norms import mixed_logits, scaled_inverse_mixture_norms
from hardmix.kernels.scaled_logits import ScaledLogits
from hardmix.kernels.shortcuts import LogitShortcuts

NEG_INF = float("-inf")


def mixcse_fast_logits(
    positives: Tensor,
    candidates: Tensor,
    logits: Tensor,
    positive_logits: Tensor,
    negative_mask: Tensor,
    positive_index: Tensor | None,
    shortcuts: LogitShortcuts,
    lam: float,
    stop_grad: bool,
    queue_mode: bool,
) -> tuple[Tensor | ScaledLogits, Tensor]:
    """MixCSE's (B, N) mixed logits of one direction, ``-inf`` where ``negative_mask`` is False.

    Args:
        positives: (B, D) unit positives p_i.
        candidates: (N, D) unit candidates n_j (in-batch: the positives of the whole batch; queue: the
            queue, whose logits are ``-inf`` at the excluded entries already).
        logits: (B, N) h_i . n_j / tau; positive_logits: (B,) h_i . p_i / tau.
        negative_mask: (B, N) bool, the valid negatives.
        positive_index: (B,) column of each positive among the candidates (in-batch), or None.
        shortcuts: the stop-gradient views of the logits and what the mask is.
        lam: the positive's weight in (0, 1). stop_grad: SG on the mixtures (gradient to h_i only).
        queue_mode: whether the candidates are a queue.

    Returns:
        The block (a :class:`ScaledLogits` of the queue block in queue mode with stop-gradient, else a
        tensor) and its detached (B, N) values.

    Example:
        >>> import torch.nn.functional as F
        >>> h, p = F.normalize(torch.randn(3, 4), dim=1), F.normalize(torch.randn(3, 4), dim=1)
        >>> logits = h @ p.T / 0.1
        >>> shortcuts = LogitShortcuts(logits, logits.diagonal(), mask_kind="positive")
        >>> mask = ~torch.eye(3, dtype=torch.bool)
        >>> block, values = mixcse_fast_logits(p, p, logits, logits.diagonal(), mask, torch.arange(3),
        ...                                    shortcuts, lam=0.2, stop_grad=True, queue_mode=False)
        >>> values.shape, bool(values.diagonal().eq(float("-inf")).all())
        (torch.Size([3, 3]), True)
    """
    if stop_grad and queue_mode:
        # Against a queue the mixed logits are the queue block rescaled by constants; as a ScaledLogits of
        # that block (the loss's own queue block) the loss adds their gradient into the block's in place.
        # The block is -inf at the excluded entries, so the mixed logits are too.
        with torch.no_grad():
            inv = scaled_inverse_mixture_norms(positives, candidates, lam)  # (1 - lam) / ||m_ij||
        shift = shortcuts.positive_anchor_logits
        mixed_block = ScaledLogits(shortcuts.anchor_logits, inv, shift, lam / (1 - lam))
        return mixed_block, mixed_block.values
    if stop_grad:
        # h_i . SG(m_ij): the gradient reaches h_i only, through the anchor-only views of the logits. The
        # norms' constants ride in the product (addmm), and the rest is in place (nothing here is saved
        # for backward but the inverse norms).
        with torch.no_grad():
            inv = scaled_inverse_mixture_norms(positives, candidates, lam)  # (1 - lam) / ||m_ij||
        pos = shortcuts.positive_anchor_logits.unsqueeze(1)
        mixed = torch.add(shortcuts.anchor_logits, pos, alpha=lam / (1 - lam)).mul_(inv)
    else:
        pos_neg_cos = positives @ candidates.T
        mixed = mixed_logits(positive_logits, logits, pos_neg_cos, lam)
    if shortcuts.mask_kind == "positive" and positive_index is not None:
        # In-batch: only each row's positive column is excluded (B entries, not a (B, N) pass).
        if stop_grad:
            # Written through a detached alias: autograd then adds no (B, N) zeroing pass to the
            # backward, and none is needed: the gradient at a -inf entry is exp(-inf) * g = 0 already.
            # (Allowed here: nothing saved for backward holds these values; mul_ saved only inv.)
            target = mixed.detach()
        else:
            target = mixed = mixed.clone()
        if candidates is positives:  # one process: the positives are on the diagonal
            target.fill_diagonal_(NEG_INF)
        else:
            rows = torch.arange(mixed.shape[0], device=mixed.device)
            target.index_put_((rows, positive_index), mixed.new_full((), NEG_INF))
    elif shortcuts.mask_kind != "all" and not queue_mode:
        # (Queue mode: the logits are -inf at the excluded entries, so the mixed logits are too.)
        mixed = mixed.masked_fill(~negative_mask, NEG_INF)
    return mixed, mixed.detach()
