"""Weighted k-NN classification of frozen features (Wu et al., InstDisc, CVPR 2018, Sec. 3.4).

Each query takes its k most cosine-similar bank features and votes for their classes with weights
exp(sim / tau); classes are ranked by their summed weight. k = 200 and tau = 0.1 are InstDisc's values,
also used by the lightly benchmarks (``lightly.utils.benchmarking.knn_predict``). The neighbours come from
faiss (``IndexFlatIP``, exact) when it is installed, or from a chunked matrix product in torch; the vote
is the same code, so both give the same predictions.

Example:
    >>> bank = torch.nn.functional.normalize(torch.randn(50, 8), dim=1)
    >>> labels = torch.arange(50) % 5
    >>> pred = knn_predict(bank, labels, bank[:3], k=10, temperature=0.1, num_classes=5, backend="torch")
    >>> pred.shape
    torch.Size([3, 5])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hardmix.utils.faiss_backend import faiss_module


def faiss_available() -> bool:
    """Whether faiss is installed (``hardmix[faiss]``)."""
    return faiss_module() is not None


def nearest_neighbours(
    bank: Tensor, queries: Tensor, k: int, backend: str = "auto", chunk: int = 1024
) -> tuple[Tensor, Tensor]:
    """The k largest inner products of each query with the bank.

    Args:
        bank: (N, D) unit features.
        queries: (M, D) unit features.
        k: neighbours (at most N).
        backend: ``auto``, ``faiss`` or ``torch``.
        chunk: queries per matrix product (torch).

    Returns:
        (similarities (M, k), indices (M, k)) in decreasing similarity.
    """
    k = min(k, bank.shape[0])
    if backend == "auto":
        backend = "faiss" if faiss_available() else "torch"
    bank = bank.float().cpu().contiguous()
    queries = queries.float().cpu().contiguous()
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(bank.shape[1])
        index.add(bank.numpy())
        sims, idx = index.search(queries.numpy(), k)
        return torch.from_numpy(sims), torch.from_numpy(idx).long()
    if backend != "torch":
        raise ValueError(f"backend: expected auto, faiss or torch, got {backend!r}")
    sims, idx = [], []
    for start in range(0, queries.shape[0], chunk):
        s, i = (queries[start : start + chunk] @ bank.T).topk(k, dim=1)
        sims.append(s)
        idx.append(i)
    return torch.cat(sims), torch.cat(idx)


def knn_vote(sims: Tensor, neighbour_labels: Tensor, num_classes: int, temperature: float) -> Tensor:
    """Class scores (M, C): sum over neighbours of exp(sim / tau), per neighbour class."""
    weights = (sims.double() / temperature).exp()
    scores = torch.zeros(sims.shape[0], num_classes, dtype=torch.float64)
    return scores.scatter_add_(1, neighbour_labels, weights)


def knn_predict(
    bank: Tensor,
    bank_labels: Tensor,
    queries: Tensor,
    k: int = 200,
    temperature: float = 0.1,
    num_classes: int | None = None,
    backend: str = "auto",
) -> Tensor:
    """Classes of each query ranked by weighted vote, (M, C) (column 0 is the prediction).

    Args:
        bank: (N, D) features (L2-normalized here).
        bank_labels: (N,) int64.
        queries: (M, D) features.
        k, temperature: InstDisc's k = 200, tau = 0.1.
        num_classes: C (default: max label + 1).
        backend: see :func:`nearest_neighbours`.
    """
    c = int(num_classes if num_classes is not None else bank_labels.max() + 1)
    sims, idx = nearest_neighbours(
        F.normalize(bank.float(), dim=1), F.normalize(queries.float(), dim=1), k, backend
    )
    scores = knn_vote(sims, bank_labels.cpu()[idx], c, temperature)
    # Ties (rare) resolve to the lower class index, stably, so both backends agree.
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def topk_accuracy(ranked: Tensor, labels: Tensor, ks: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """``{"top1": .., "top5": ..}`` in percent from ranked predictions (M, C) and labels (M,) (top-k is
    100 when C <= k)."""
    labels = labels.cpu().view(-1, 1)
    ranked = ranked.cpu()
    out = {}
    for k in ks:
        hit = (ranked[:, :k] == labels).any(dim=1).float().mean()
        out[f"top{k}"] = 100.0 * float(hit)
    return out
