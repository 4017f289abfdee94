"""Backbones: torchvision's ResNet-18/50, narrower ResNets for CPU runs, and any timm model by name.

Every backbone returns pooled features (B, D): the classifier is removed. The small-image stem (a 3x3
stride-1 convolution and no max-pool) is the CIFAR variant of ResNet used by SimCLR (Chen et al. 2020,
App. B.9) and solo-learn for 32 to 64 pixel images.

Example:
    >>> import torch
    >>> net, dim = build_backbone("resnet10", width=8, small_stem=True)
    >>> net(torch.randn(2, 3, 32, 32)).shape, dim
    (torch.Size([2, 64]), 64)
"""

from __future__ import annotations

from torch import nn

# name -> (block, layers); resnet18/resnet50 at width 64 come from torchvision itself.
_RESNETS = {
    "resnet10": ("basic", (1, 1, 1, 1)),
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
}
_TORCHVISION = ("resnet18", "resnet50")


def build_backbone(name: str, width: int = 64, small_stem: bool = False) -> tuple[nn.Module, int]:
    """Build a randomly initialized backbone without its classifier.

    Args:
        name: ``resnet18``/``resnet50`` (torchvision at width 64), ``resnet10``/``resnet34``, or a timm
            model name (``timm:NAME`` forces timm, e.g. ``timm:resnet18d``).
        width: base width of the ResNets (channels width, 2w, 4w, 8w); 64 is the standard network.
        small_stem: replace the 7x7 stride-2 convolution and max-pool with a 3x3 stride-1 convolution.

    Returns:
        (module mapping (B, 3, H, W) images to (B, D) features, D).

    Raises:
        ValueError naming ``model.backbone``, ``model.width`` or ``model.small_stem``.
    """
    if name in _TORCHVISION and width == 64:
        import torchvision

        net = getattr(torchvision.models, name)(weights=None)
        dim = net.fc.in_features
        net.fc = nn.Identity()
    elif name in _RESNETS:
        from timm.models.resnet import BasicBlock, Bottleneck, ResNet

        kind, layers = _RESNETS[name]
        block = BasicBlock if kind == "basic" else Bottleneck
        net = ResNet(
            block,
            layers,
            num_classes=0,
            stem_width=width,
            channels=(width, 2 * width, 4 * width, 8 * width),
            zero_init_last=False,  # torchvision's default initialization
        )
        dim = net.num_features
    else:
        if width != 64:
            raise ValueError(
                f"model.width: only the ResNets ({', '.join(_RESNETS)}) take a width, not {name!r}"
            )
        import timm

        timm_name = name.removeprefix("timm:")
        try:
            net = timm.create_model(timm_name, pretrained=False, num_classes=0)
        except RuntimeError as e:
            raise ValueError(
                f"model.backbone: {name!r} is neither a ResNet here nor a timm model ({e})"
            ) from e
        dim = int(net.num_features)
    if small_stem:
        _small_stem(net, name)
    return net, dim


def _small_stem(net: nn.Module, name: str) -> None:
    conv = getattr(net, "conv1", None)
    if not isinstance(conv, nn.Conv2d) or not hasattr(net, "maxpool"):
        raise ValueError(
            f"model.small_stem: {name!r} has no ResNet stem (conv1 and maxpool) to replace; "
            "set small_stem: false"
        )
    new = nn.Conv2d(conv.in_channels, conv.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")
    net.conv1 = new
    net.maxpool = nn.Identity()
