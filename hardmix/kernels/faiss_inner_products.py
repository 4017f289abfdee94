"""Inner products of indexed row pairs of a table with faiss, for MoCHi's pair-mixture norms on CPU
(:func:`hardmix.kernels.mixture_norms.pair_inverse_norms`)."""

from __future__ import annotations

import torch
from torch import Tensor

from hardmix.utils.faiss_backend import faiss_module


def indexed_inner_products(table: Tensor, first: Tensor, second: Tensor) -> Tensor | None:
    """(M,) ``table[first[m]] . table[second[m]]`` with faiss, or None where faiss cannot do it.

    One pass of ``faiss.pairwise_indexed_inner_product`` (SIMD, OpenMP over the pairs): the rows are read
    straight from the table and no (M, D) gather is written. faiss runs on as many OpenMP threads as
    torch's intra-op pool (``torch.get_num_threads()``) and its own setting is restored afterwards.
    Returns None (the caller computes the products in torch) without faiss, off the CPU, for other dtypes
    than float32, and under autograd.

    Args:
        table: (K, D) float32 rows.
        first: (M,) int64 row indices.
        second: (M,) int64 row indices.

    Example:
        >>> table = torch.eye(3)
        >>> dots = indexed_inner_products(table, torch.tensor([0, 1]), torch.tensor([0, 2]))
        >>> dots is None or dots.tolist() == [1.0, 0.0]
        True
    """
    faiss = faiss_module()
    if (
        faiss is None
        or not hasattr(faiss, "pairwise_indexed_inner_product")
        or table.device.type != "cpu"
        or table.dtype != torch.float32
        or table.requires_grad
        or table.dim() != 2
    ):
        return None
    table = table.contiguous()
    first = first.reshape(-1).to(torch.int64).contiguous()
    second = second.reshape(-1).to(torch.int64).contiguous()
    if first.shape != second.shape:
        raise ValueError(f"first, second: as many indices expected, got {first.numel()} and {second.numel()}")
    out = torch.empty(first.numel(), dtype=torch.float32)
    if first.numel() == 0:
        return out
    for name, index in (("first", first), ("second", second)):  # faiss reads unchecked memory
        low, high = torch.aminmax(index)
        if int(low) < 0 or int(high) >= table.shape[0]:
            raise IndexError(
                f"{name}: row indices must lie in [0, {table.shape[0]}), got {int(low)}..{int(high)}"
            )
    threads = torch.get_num_threads()
    before = faiss.omp_get_max_threads()
    if threads != before:
        faiss.omp_set_num_threads(threads)
    try:
        faiss.pairwise_indexed_inner_product(
            table.shape[1],
            first.numel(),
            faiss.swig_ptr(table.numpy()),
            faiss.swig_ptr(first.numpy()),
            faiss.swig_ptr(table.numpy()),
            faiss.swig_ptr(second.numpy()),
            faiss.swig_ptr(out.numpy()),
        )
    finally:
        if threads != before:
            faiss.omp_set_num_threads(before)
    return out
