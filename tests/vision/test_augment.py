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
