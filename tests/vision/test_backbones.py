"""Backbones: torchvision ResNets, narrow ResNets, timm by name, the small-image stem."""

from __future__ import annotations

import pytest
import torch
import torchvision

from hardmix.vision.backbones import build_backbone


def test_torchvision_resnets_without_classifier():
    net, dim = build_backbone("resnet18")
    assert isinstance(net, torchvision.models.ResNet) and dim == 512 and isinstance(net.fc, torch.nn.Identity)
    net50, dim50 = build_backbone("resnet50", small_stem=True)
    assert (
        dim50 == 2048 and net50.conv1.kernel_size == (3, 3) and isinstance(net50.maxpool, torch.nn.Identity)
    )


def test_small_stem_keeps_the_resolution_of_small_images():
    net, dim = build_backbone("resnet10", width=8, small_stem=True)
    feats = {}
    net.layer4.register_forward_hook(lambda m, i, o: feats.setdefault("x", o))
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, dim) == (2, 64)
    assert feats["x"].shape[-1] == 4  # 32 / 8: only the three stride-2 stages downsample


def test_any_timm_model_by_name():
    net, dim = build_backbone("timm:resnet14t")
    assert net(torch.randn(1, 3, 64, 64)).shape == (1, dim)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("no_such_model_xyz",), "model.backbone"),
        (("timm:vit_tiny_patch16_224", 32), "model.width"),
        (("timm:resnet18d", 64, True), "model.small_stem"),
    ],
)
def test_errors_name_the_key(args, message):
    with pytest.raises(ValueError, match=message):
        build_backbone(*args)
