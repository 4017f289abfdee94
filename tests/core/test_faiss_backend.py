"""faiss as an optional backend: ``indexed_inner_products`` and the MoCHi pair norms that use it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.kernels import mixture_norms
from hardmix.kernels.faiss_inner_products import indexed_inner_products
from hardmix.losses import ContrastiveLoss
from hardmix.utils.faiss_backend import faiss_module

needs_faiss = pytest.mark.skipif(faiss_module() is None, reason="faiss is not installed (hardmix[faiss])")


@needs_faiss
def test_indexed_inner_products_equal_numpy() -> None:
    g = torch.Generator().manual_seed(0)
    table = torch.randn(300, 37, generator=g)
    first = torch.randint(300, (5000,), generator=g)
    second = torch.randint(300, (5000,), generator=g)
    got = indexed_inner_products(table, first, second)
    t = table.double().numpy()
    want = np.einsum("md,md->m", t[first.numpy()], t[second.numpy()])
    np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=1e-5)


@needs_faiss
def test_indexed_inner_products_use_torch_thread_count_and_restore_faiss_setting() -> None:
    faiss = faiss_module()
    before_torch, before_faiss = torch.get_num_threads(), faiss.omp_get_max_threads()
    table = torch.randn(50, 8)
    index = torch.arange(50)
    try:
        torch.set_num_threads(1)
        faiss.omp_set_num_threads(2)
        dots = indexed_inner_products(table, index, index)
        assert faiss.omp_get_max_threads() == 2
    finally:
        torch.set_num_threads(before_torch)
        faiss.omp_set_num_threads(before_faiss)
    torch.testing.assert_close(dots, table.square().sum(1), rtol=1e-5, atol=1e-5)


@needs_faiss
def test_indexed_inner_products_check_indices_and_shapes() -> None:
    table = torch.randn(10, 4)
    with pytest.raises(IndexError, match="second"):
        indexed_inner_products(table, torch.tensor([0, 1]), torch.tensor([3, 10]))
    with pytest.raises(IndexError, match="first"):
        indexed_inner_products(table, torch.tensor([-1, 1]), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="first, second"):
        indexed_inner_products(table, torch.tensor([0, 1]), torch.tensor([3]))


def test_indexed_inner_products_decline_what_faiss_cannot_do() -> None:
    index = torch.tensor([0, 1])
    assert indexed_inner_products(torch.randn(4, 3, dtype=torch.float64), index, index) is None
    assert indexed_inner_products(torch.randn(4, 3, requires_grad=True), index, index) is None


def _pair_setup(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    negatives = F.normalize(torch.randn(2000, 64, generator=g), dim=1)
    first = torch.randint(2000, (32, 300), generator=g)
    second = (first + 1 + torch.randint(1999, (32, 300), generator=g)) % 2000
    alpha = torch.rand(32, 300, generator=g)
    return negatives, first, second, alpha


@needs_faiss
def test_pair_inverse_norms_faiss_and_torch_paths_agree_with_explicit_mixtures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    negatives, first, second, alpha = _pair_setup()
    with_faiss = mixture_norms.pair_inverse_norms(negatives, first, second, alpha)
    monkeypatch.setattr(mixture_norms, "indexed_inner_products", lambda *args: None)
    with_torch = mixture_norms.pair_inverse_norms(negatives, first, second, alpha)
    n = negatives.double().numpy()
    a = alpha.double().numpy()[..., None]
    mixed = a * n[first.numpy()] + (1 - a) * n[second.numpy()]
    want = 1.0 / np.linalg.norm(mixed, axis=2)
    np.testing.assert_allclose(with_faiss.double().numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(with_torch.double().numpy(), want, rtol=1e-5)


@needs_faiss
def test_mochi_loss_and_gradient_are_the_same_with_and_without_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp32 at a shape where the pre-filter also runs: the two pair-norm paths give one loss."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(64, 32, generator=g)
    k = q + 0.3 * torch.randn(64, 32, generator=g)
    queue = torch.randn(4096, 32, generator=g)
    spec = {"name": "mochi", "n_hard": 256, "n_pair": 300, "n_query": 64}

    def loss_and_grad() -> tuple[torch.Tensor, torch.Tensor]:
        z = q.clone().requires_grad_(True)
        loss = ContrastiveLoss(0.2, spec).queue(z, k, queue, generator=torch.Generator().manual_seed(3)).loss
        loss.backward()
        return loss.detach(), z.grad

    loss_faiss, grad_faiss = loss_and_grad()
    monkeypatch.setattr(mixture_norms, "indexed_inner_products", lambda *args: None)
    loss_torch, grad_torch = loss_and_grad()
    torch.testing.assert_close(loss_faiss, loss_torch, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad_faiss, grad_torch, rtol=0, atol=1e-7)


def test_hardmix_no_faiss_environment_variable_hides_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARDMIX_NO_FAISS", "1")
    faiss_module.cache_clear()
    try:
        assert faiss_module() is None
        assert indexed_inner_products(torch.randn(4, 3), torch.tensor([0]), torch.tensor([1])) is None
    finally:
        monkeypatch.delenv("HARDMIX_NO_FAISS")
        faiss_module.cache_clear()


def test_a_broken_faiss_install_falls_back_to_torch_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def broken_import(name, *args, **kwargs):
        if name == "faiss":
            raise OSError("libgomp.so.1: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken_import)
    faiss_module.cache_clear()
    try:
        with pytest.warns(UserWarning, match="libgomp"):
            assert faiss_module() is None
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
        faiss_module.cache_clear()
