"""GatheredLogits: columns that are weighted sums of entries of a logit block, and their fused gradient
in info_nce_from_blocks (scatter-added into the source block's gradient), against NumPy and autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import GatheredLogits, info_nce_from_blocks

from ._reference import cross_entropy


def _setup(seed: int = 0, b: int = 5, k: int = 12, j: int = 2, m: int = 7):
    g = torch.Generator().manual_seed(seed)
    source = torch.randn(b, k, generator=g, dtype=torch.float64) * 3
    index = torch.randint(k, (b, j, m), generator=g)
    weight = torch.rand(b, j, m, generator=g, dtype=torch.float64)
    direct = torch.randn(b, m, generator=g, dtype=torch.float64)
    return source, index, weight, direct


def test_values_equal_numpy() -> None:
    source, index, weight, direct = _setup()
    cols = GatheredLogits(source, index, weight, direct)
    s, i, w = source.numpy(), index.numpy(), weight.numpy()
    want = np.zeros((5, 7))
    for b in range(5):
        for m in range(7):
            want[b, m] = sum(w[b, j, m] * s[b, i[b, j, m]] for j in range(2)) + direct[b, m].item()
    np.testing.assert_allclose(cols.values.numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cols.materialize().detach().numpy(), want, rtol=0, atol=1e-12)


def _support_setup(index: torch.Tensor, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A (B, 6) support of source columns (one repeated, as a support may have) and (B, J, M) positions
    into it, shaped like ``index``: returns (support, positions)."""
    g = torch.Generator().manual_seed(seed)
    support = torch.randint(k, (index.shape[0], 6), generator=g)
    support[:, 5] = support[:, 0]  # a repeated column
    positions = torch.randint(6, index.shape, generator=g)
    return support, positions


def test_values_with_a_support_equal_numpy() -> None:
    source, index, weight, direct = _setup()
    support, positions = _support_setup(index, 12, seed=5)
    cols = GatheredLogits(source, positions, weight, direct, support=support)
    s, p, w, c = source.numpy(), positions.numpy(), weight.numpy(), support.numpy()
    want = np.zeros((5, 7))
    for b in range(5):
        for m in range(7):
            want[b, m] = sum(w[b, j, m] * s[b, c[b, p[b, j, m]]] for j in range(2)) + direct[b, m].item()
    np.testing.assert_allclose(cols.values.numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cols.materialize().detach().numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("with_support", [False, True])
@pytest.mark.parametrize("with_direct", [False, True])
def test_fused_loss_and_gradients_equal_cross_entropy_of_the_concatenation(
    with_direct: bool, with_support: bool
) -> None:
    """The source block is among the blocks: the fused backward (scatter into its gradient, through the
    (B, C) support buffer when there is one) must give autograd's gradients of cross-entropy over
    [positive | source | gathered columns]."""
    source, index, weight, direct = _setup(seed=1)
    source[1, 3] = float("-inf")  # an excluded entry, never gathered below
    support = None
    if with_support:
        support, index = _support_setup(index, 12, seed=6)
        support[support == 3] = 4
        columns = support.gather(1, index.flatten(1))
    else:
        index[index == 3] = 4
        columns = index.flatten(1)
    pos = torch.randn(5, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    targets = torch.zeros(5, dtype=torch.long)

    a_src, a_pos = source.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    a_dir = direct.clone().requires_grad_(True) if with_direct else None
    cols = GatheredLogits(a_src, index, weight, a_dir, support=support)
    got = info_nce_from_blocks(a_pos[:, 0], [a_pos, a_src, cols])
    got.backward()

    b_src, b_pos = source.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    b_dir = direct.clone().requires_grad_(True) if with_direct else None
    extra = (b_src.gather(1, columns).view(5, 2, 7) * weight).sum(1)
    extra = extra + b_dir if with_direct else extra
    want = F.cross_entropy(torch.cat([b_pos, b_src, extra], 1), targets)
    want.backward()

    numpy_logits = torch.cat([pos, source, extra.detach()], 1).numpy()
    assert abs(float(got.detach()) - cross_entropy(numpy_logits, targets.numpy())) < 1e-12
    torch.testing.assert_close(a_src.grad, b_src.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(a_pos.grad, b_pos.grad, rtol=0, atol=1e-12)
    if with_direct:
        torch.testing.assert_close(a_dir.grad, b_dir.grad, rtol=0, atol=1e-12)
    assert torch.isfinite(a_src.grad).all()


def test_source_outside_the_blocks_is_materialized() -> None:
    """A source that is not one of the blocks (here: a masked copy) takes autograd's path: the same loss
    and gradient as building the columns by hand."""
    source, index, weight, _ = _setup(seed=3)
    leaf = source.clone().requires_grad_(True)
    logits = leaf * 2.0
    cols = GatheredLogits(logits, index, weight)
    got = info_nce_from_blocks(logits[:, 0], [logits.masked_fill(logits < -5, float("-inf")), cols])
    got.backward()
    leaf2 = source.clone().requires_grad_(True)
    logits2 = leaf2 * 2.0
    extra = (logits2.gather(1, index.flatten(1)).view(5, 2, 7) * weight).sum(1)
    masked = logits2.masked_fill(logits2 < -5, float("-inf"))
    want = F.cross_entropy(torch.cat([masked, extra], 1), torch.zeros(5, dtype=torch.long))
    want.backward()
    assert abs(float(got.detach()) - float(want.detach())) < 1e-12
    torch.testing.assert_close(leaf.grad, leaf2.grad, rtol=0, atol=1e-12)


def test_bad_shapes_and_weights_with_gradient_raise() -> None:
    source, index, weight, direct = _setup()
    with pytest.raises(ValueError, match="index and weight"):
        GatheredLogits(source, index, weight[:, :1])
    with pytest.raises(ValueError, match="direct"):
        GatheredLogits(source, index, weight, direct[:, :3])
    with pytest.raises(ValueError, match="index"):
        GatheredLogits(source[:2], index, weight)
    with pytest.raises(ValueError, match="weight"):
        GatheredLogits(source, index, weight.clone().requires_grad_(True))
    with pytest.raises(ValueError, match="support"):
        GatheredLogits(source, index, weight, support=torch.zeros(4, 3, dtype=torch.long))
