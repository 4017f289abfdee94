"""ScaledLogits: a block ``(source + w shift) * scale`` with constant scale, and its fused gradient in
info_nce_from_blocks (added into the source block's gradient in place), against NumPy and autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.losses import GatheredLogits, ScaledLogits, info_nce_from_blocks

from ._reference import cross_entropy


def _setup(seed: int = 0, b: int = 5, k: int = 9):
    g = torch.Generator().manual_seed(seed)
    source = torch.randn(b, k, generator=g, dtype=torch.float64) * 3
    scale = torch.rand(b, k, generator=g, dtype=torch.float64) + 0.5
    shift = torch.randn(b, generator=g, dtype=torch.float64)
    return source, scale, shift


def test_values_equal_numpy() -> None:
    source, scale, shift = _setup()
    cols = ScaledLogits(source, scale, shift, shift_weight=0.25)
    want = (source.numpy() + 0.25 * shift.numpy()[:, None]) * scale.numpy()
    np.testing.assert_allclose(cols.values.numpy(), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cols.materialize().detach().numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shift_grad", [False, True])
def test_fused_loss_and_gradients_equal_cross_entropy_of_the_concatenation(shift_grad: bool) -> None:
    """The source block is among the blocks (with -inf entries, which stay -inf): the fused backward
    must give autograd's gradients of cross-entropy over [positive | source | scaled block], also next to
    a GatheredLogits of the same source (MoCHi and MixCSE composed)."""
    source, scale, shift = _setup(seed=1)
    source[1, 3] = source[4, 0] = float("-inf")
    pos = torch.randn(5, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    index = torch.randint(9, (5, 2, 4), generator=torch.Generator().manual_seed(3))
    index[(index == 3) | (index == 0)] = 5  # the gathered entries must be finite
    weight = torch.rand(5, 2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    targets = torch.zeros(5, dtype=torch.long)

    a_src, a_pos = source.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    a_shift = shift.clone().requires_grad_(shift_grad)
    scaled = ScaledLogits(a_src, scale, a_shift, shift_weight=0.25)
    got = info_nce_from_blocks(a_pos[:, 0], [a_pos, a_src, scaled, GatheredLogits(a_src, index, weight)])
    got.backward()

    b_src, b_pos = source.clone().requires_grad_(True), pos.clone().requires_grad_(True)
    b_shift = shift.clone().requires_grad_(shift_grad)
    extra = (b_src + 0.25 * b_shift.unsqueeze(1)) * scale
    gathered = (b_src.gather(1, index.flatten(1)).view(5, 2, 4) * weight).sum(1)
    want = F.cross_entropy(torch.cat([b_pos, b_src, extra, gathered], 1), targets)
    want.backward()

    numpy_logits = torch.cat([pos, source, extra.detach(), gathered.detach()], 1).numpy()
    assert abs(float(got.detach()) - cross_entropy(numpy_logits, targets.numpy())) < 1e-12
    torch.testing.assert_close(a_src.grad, b_src.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(a_pos.grad, b_pos.grad, rtol=0, atol=1e-12)
    assert a_src.grad[1, 3] == 0 and a_src.grad[4, 0] == 0
    if shift_grad:
        torch.testing.assert_close(a_shift.grad, b_shift.grad, rtol=0, atol=1e-12)
    else:
        assert a_shift.grad is None


def test_source_outside_the_blocks_is_materialized() -> None:
    source, scale, shift = _setup(seed=5)
    leaf, leaf_shift = source.clone().requires_grad_(True), shift.clone().requires_grad_(True)
    logits = leaf * 2.0
    got = info_nce_from_blocks(logits[:, 0], [logits[:, :4], ScaledLogits(logits, scale, leaf_shift, 0.5)])
    got.backward()
    leaf2, leaf_shift2 = source.clone().requires_grad_(True), shift.clone().requires_grad_(True)
    logits2 = leaf2 * 2.0
    extra = (logits2 + 0.5 * leaf_shift2.unsqueeze(1)) * scale
    want = F.cross_entropy(torch.cat([logits2[:, :4], extra], 1), torch.zeros(5, dtype=torch.long))
    want.backward()
    assert abs(float(got.detach()) - float(want.detach())) < 1e-12
    torch.testing.assert_close(leaf.grad, leaf2.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(leaf_shift.grad, leaf_shift2.grad, rtol=0, atol=1e-12)


def test_bad_shapes_and_scales_with_gradient_raise() -> None:
    source, scale, shift = _setup()
    with pytest.raises(ValueError, match="scale"):
        ScaledLogits(source, scale[:, :3], shift, 0.5)
    with pytest.raises(ValueError, match="shift"):
        ScaledLogits(source, scale, shift[:2], 0.5)
    with pytest.raises(ValueError, match="scale"):
        ScaledLogits(source, scale.clone().requires_grad_(True), shift, 0.5)
