"""Batched tensor augmentations: torchvision's formulas, per-image randomness, determinism."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from hardmix.vision.augment import (
    TensorAugment,
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    crop_resize,
    pil_transform,
    random_blur,
    random_resized_crop_boxes,
)
from hardmix.vision.config import AugmentSection


@pytest.mark.parametrize(
    ("ours", "theirs", "factors"),
    [
        (adjust_brightness, TF.adjust_brightness, [0.6, 1.0, 1.4]),
        (adjust_contrast, TF.adjust_contrast, [0.6, 1.0, 1.4]),
        (adjust_saturation, TF.adjust_saturation, [0.6, 1.0, 1.4]),
        (adjust_hue, TF.adjust_hue, [-0.1, 0.03, 0.5]),
    ],
)
def test_color_ops_match_torchvision_per_image(ours, theirs, factors):
    x = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = ours(x, torch.tensor(factors))
    for i, f in enumerate(factors):
        torch.testing.assert_close(out[i], theirs(x[i], f), atol=1e-5, rtol=0)


def test_blur_matches_torchvision():
    x = torch.rand(2, 3, 16, 16)
    out = random_blur(x, 1.0, (1.5, 1.5), 7, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, TF.gaussian_blur(x, [7, 7], [1.5, 1.5]), atol=1e-5, rtol=0)


def test_crop_boxes_fit_the_image_and_the_ranges():
    boxes = random_resized_crop_boxes(
        4000, 32, 48, (0.2, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(0)
    )
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 48).all() and (boxes[:, 3] <= 32).all()
    area = w * h / (32 * 48)
    assert area.min() >= 0.19 and area.max() <= 1.0 and area.std() > 0.1


def test_crop_resize_of_the_whole_image_is_the_identity():
    x = torch.rand(2, 3, 16, 16)
    out = crop_resize(x, torch.tensor([[0.0, 0.0, 16.0, 16.0]] * 2), 16)
    torch.testing.assert_close(out, x)


def test_batch_is_deterministic_per_generator_and_random_per_image():
    aug = TensorAugment(AugmentSection(crop_size=24))
    x = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8).expand(8, -1, -1, -1)
    a = aug(x, torch.Generator().manual_seed(1))
    b = aug(x, torch.Generator().manual_seed(1))
    c = aug(x, torch.Generator().manual_seed(2))
    assert a.shape == (8, 3, 24, 24) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len({tuple(v.flatten()[:16].tolist()) for v in a}) == 8  # the same image, 8 different views


def test_pil_path_gives_the_same_shape():
    from PIL import Image

    img = Image.fromarray(torch.randint(0, 256, (40, 40, 3), dtype=torch.uint8).numpy())
    assert pil_transform(AugmentSection(crop_size=32))(img).shape == (3, 32, 32)


def test_the_jitter_in_fewer_passes_is_torchvisions_ops_in_the_drawn_order():
    """Brightness, contrast and saturation in one pass per stage, hue in another: for every image, the
    same as torchvision's four functions applied in its drawn order with its drawn factors."""
    from hardmix.vision.augment import JitterDraws, color_jitter

    n, strength = 48, (0.4, 0.4, 0.4, 0.1)
    x = torch.rand(n, 3, 12, 12, generator=torch.Generator().manual_seed(3))
    draws = JitterDraws(n, strength, 0.8, torch.Generator().manual_seed(7))
    out = color_jitter(x, strength, 0.8, torch.Generator().manual_seed(7))
    ops = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    assert 0 < int(draws.apply.sum()) < n
    for i in range(n):
        ref = x[i]
        if draws.apply[i]:
            for stage in range(4):
                op = int(draws.order[i, stage])
                ref = ops[op](ref, float(draws.factors[i, op]))
        torch.testing.assert_close(out[i], ref, atol=1e-5, rtol=0)


def test_the_jitter_plan_gives_each_applied_image_one_operation_per_stage():
    from hardmix.vision.augment import JitterDraws

    draws = JitterDraws(500, (0.4, 0.0, 0.4, 0.1), 0.8, torch.Generator().manual_seed(0))
    plan = draws.plan()
    applied = set(torch.nonzero(draws.apply).squeeze(1).tolist())
    for stage in range(4):
        bcs = plan.get(f"bcs_rows{stage}", torch.empty(0, dtype=torch.long)).tolist()
        hue = plan.get(f"hue_rows{stage}", torch.empty(0, dtype=torch.long)).tolist()
        op = draws.order[:, stage]
        # contrast (op 1) is off: its images are left alone at that stage
        assert set(bcs) == {i for i in applied if op[i] in (0, 2)}
        assert set(hue) == {i for i in applied if op[i] == 3}
        if bcs:
            kinds = plan[f"bcs_kind{stage}"]
            assert torch.equal(kinds, op[plan[f"bcs_rows{stage}"]])
            assert torch.equal(plan[f"bcs_f{stage}"], draws.factors[plan[f"bcs_rows{stage}"], kinds])


def test_the_batched_draws_follow_moco_v2s_distributions():
    """The draws made up front for a batch: each choice at its probability, factors uniform on
    torchvision's ranges, the jitter's order a uniform permutation (KS, chi-square and binomial bounds at
    n = 20,000)."""
    from scipy import stats

    from hardmix.vision.augment import JitterDraws

    n = 20_000
    cfg = AugmentSection(crop_size=32)
    draws = JitterDraws(n, cfg.jitter, cfg.jitter_prob, torch.Generator().manual_seed(0))

    def rate_ok(mask: torch.Tensor, p: float) -> bool:
        return abs(float(mask.float().mean()) - p) < 5 * (p * (1 - p) / mask.numel()) ** 0.5

    assert rate_ok(draws.apply, cfg.jitter_prob)
    b, c, s, h = cfg.jitter
    for col, (lo, hi) in enumerate([(1 - b, 1 + b), (1 - c, 1 + c), (1 - s, 1 + s), (-h, h)]):
        assert stats.kstest(draws.factors[:, col].numpy(), "uniform", args=(lo, hi - lo)).pvalue > 1e-3
    assert torch.equal(draws.order.sort(dim=1).values, torch.arange(4).expand(n, 4))
    for stage in range(4):
        counts = torch.bincount(draws.order[:, stage], minlength=4).numpy()
        assert stats.chisquare(counts).pvalue > 1e-3
    d = TensorAugment(cfg).draws(n, 32, 32, torch.Generator().manual_seed(1))
    assert rate_ok(d["gray"], cfg.grayscale_prob) and rate_ok(d["flip"], cfg.flip_prob)
    blurred = torch.zeros(n, dtype=torch.bool)
    blurred[d["blur_rows"]] = True
    assert rate_ok(blurred, cfg.blur_prob)
    # each blur kernel: normalized, symmetric, peaked at the center, wider for larger sigma
    w = d["blur_w1d"]
    torch.testing.assert_close(w.sum(dim=1), torch.ones(len(w)))
    torch.testing.assert_close(w, w.flip(1))
    assert (w.argmax(dim=1) == w.shape[1] // 2).all()


def test_the_packed_copy_gives_back_every_tensor_exactly():
    from hardmix.vision.augment import pack, unpack

    tensors = {"rows": torch.tensor([0, 5, 2**24 - 1]), "mask": torch.tensor([True, False]),
               "w": torch.rand(3, 7), "empty": torch.empty(0, dtype=torch.long)}
    flat, layout = pack(tensors)
    assert flat.dtype == torch.float32 and flat.numel() == 3 + 2 + 21
    back = unpack(flat, layout)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t)
