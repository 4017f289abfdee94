"""Backbones out: a trained MoCo run's query backbone for torchvision, timm or plain PyTorch.

- :func:`export_backbone` (``hardmix export vision RUN OUT``) writes the query encoder's backbone (no
  projector, no key encoder) as ONE file: a flat state dict of tensors, read by
  ``torch.load(OUT, weights_only=True)``, under the key names of ``torchvision.models.<arch>()`` (ResNet-18
  and ResNet-50 at width 64 are torchvision's own modules; ResNet-34 uses the same names) or of
  ``timm.create_model(<name>)`` for timm backbones, so ``load_state_dict(..., strict=False)`` reports only
  the classifier (``fc.*``) missing.
- :func:`load_backbone` gives the backbone itself: a module in eval mode mapping images (B, 3, H, W) to
  pooled features (B, D), D 512 for ResNet-18.

A small-stem backbone (``model.small_stem``: a 3x3 stride-1 first convolution, no max-pool) and a
narrowed one (``model.width`` < 64) keep the same key names, with other shapes: build the target as
:func:`hardmix.vision.backbones.build_backbone` does (see :func:`target_description`).

The run folder is read in one place, :func:`read_vision_run`: ``RUN/checkpoint.pt``, loaded safely by the
engine (:func:`hardmix.training.checkpoint.load_checkpoint`, ``weights_only``), whose ``"config"`` holds the
model section (``model.backbone``, ``model.width``, ``model.small_stem``) and whose ``"model"`` entry is the
MoCo module's state dict (the query backbone under ``encoder_q.backbone.``).

Example:
    >>> import tempfile, torch, pathlib
    >>> from hardmix.training.checkpoint import save_checkpoint
    >>> from hardmix.vision.backbones import build_backbone
    >>> from hardmix.vision.moco import MoCo
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> net, dim = build_backbone("resnet10", width=4, small_stem=True)
    >>> moco = MoCo(net, dim, proj_hidden=8, proj_dim=4, queue_size=8)
    >>> config = {"model": {"backbone": "resnet10", "width": 4, "small_stem": True}}
    >>> _ = save_checkpoint({"model": moco.state_dict(), "config": config}, run / "checkpoint.pt", "vision")
    >>> load_backbone(run)(torch.randn(2, 3, 16, 16)).shape
    torch.Size([2, 32])
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from hardmix.utils.confine import save_torch


@dataclass(frozen=True)
class VisionRun:
    """What a vision run folder gives the export.

    Attributes:
        backbone, width, small_stem: the ``model`` section's backbone keys.
        state: the query backbone's state dict (prefix removed), checked key by key against the backbone
            those keys build.
        checkpoint: the file it came from.
        net: that backbone holding ``state``, in eval mode.
    """

    backbone: str
    width: int
    small_stem: bool
    state: dict[str, Tensor]
    checkpoint: Path
    step: int | None = None
    total_steps: int | None = None
    net: nn.Module | None = None


def read_vision_run(run: str | os.PathLike[str]) -> VisionRun:
    """Read a vision run folder (or a checkpoint file): the backbone keys of its config and the query
    backbone's weights, loaded key by key into the backbone they describe
    (:func:`hardmix.vision.evaluation.checked_backbone`, as evaluation, ``--resume`` and encode load them).
    The one function that knows the run folder's layout.

    Raises:
        FileNotFoundError / ValueError: one line naming the path or key (a partial or mismatched
            backbone: the file and the first tensor that does not match).
    """
    from hardmix.training.checkpoint import load_checkpoint
    from hardmix.vision.evaluation import (
        BACKBONE_PREFIX,
        checked_backbone,
        query_weights,
        resolve_checkpoint,
    )

    ckpt = resolve_checkpoint(run)
    state = load_checkpoint(ckpt, task="vision")  # safe (weights_only); foreign or text: one line
    model = dict((state.get("config") or {}).get("model") or {})
    if "backbone" not in model:
        raise ValueError(f"RUN: model.backbone is missing from the config in {ckpt}")
    weights = query_weights(state, f"RUN: {ckpt}")
    backbone, width, small_stem = str(model["backbone"]), int(model.get("width", 64)), \
        bool(model.get("small_stem", False))
    net = checked_backbone(backbone, width, small_stem, weights, f"RUN: {ckpt} ({BACKBONE_PREFIX[:-1]})")
    step, total = (v if isinstance(v, int) else None for v in (state.get("step"), state.get("total_steps")))
    return VisionRun(backbone, width, small_stem, weights, ckpt, step, total, net)


def load_backbone(run: str | os.PathLike[str], device: str | torch.device = "cpu") -> nn.Module:
    """The trained query backbone of a run: (B, 3, H, W) images to (B, D) pooled features, eval mode.

    Args:
        run: a vision run folder or checkpoint file.
        device: where to put it.
    """
    net = read_vision_run(run).net
    assert net is not None  # read_vision_run loads it
    return net.to(device).eval()


def target_description(info: VisionRun) -> str:
    """How to build the module that the exported file loads into."""
    name = info.backbone
    if name.startswith("timm:") or name not in ("resnet10", "resnet18", "resnet34", "resnet50"):
        base = f"timm.create_model({name.removeprefix('timm:')!r})"
    elif info.width == 64 and name != "resnet10":
        base = f"torchvision.models.{name}()"
    else:
        return (f"hardmix.vision.backbones.build_backbone({name!r}, width={info.width}, "
                f"small_stem={info.small_stem}) (no torchvision model has this shape)")
    if info.small_stem:
        base += " with conv1 = nn.Conv2d(3, C, 3, 1, 1, bias=False) and maxpool = nn.Identity()"
    return base


@dataclass(frozen=True)
class ExportResult:
    path: Path
    tensors: int
    target: str
    unfinished: str | None = None  # what to say when the run had not finished


def export_backbone(run: str | os.PathLike[str], out: str | os.PathLike[str]) -> ExportResult:
    """Write the query backbone of ``run`` to ``out`` (one file, a flat state dict of tensors, written
    atomically).

    Returns:
        The file, its tensor count and the module it loads into (:func:`target_description`).
    """
    info = read_vision_run(run)
    state = {k: v.detach().clone().contiguous() for k, v in info.state.items()}
    path = save_torch(state, out, Path(out).parent)  # inside the folder the export path names
    step, total = info.step, info.total_steps
    unfinished = step is not None and total is not None and step < total
    return ExportResult(path, len(state), target_description(info),
                        f"{info.checkpoint} is of an unfinished run (step {step} of {total}): the weights "
                        f"written are those of step {step}" if unfinished else None)


def cmd_export(args: argparse.Namespace) -> int:
    """``hardmix export vision RUN OUT`` (its parser is in :mod:`hardmix.vision.cli`)."""
    res = export_backbone(args.run, args.out)
    if res.unfinished:
        print(f"hardmix: note: {res.unfinished}", file=sys.stderr)
    own = res.target.startswith("hardmix.")
    print(f"wrote {res.path}: the query backbone, {res.tensors} tensors (no projector)\n"
          f"load: net = {res.target}; net.load_state_dict(torch.load({str(res.path)!r}, weights_only=True)"
          + (")  # every key" if own else ", strict=False)  # missing: the classifier only"))
    return 0


__all__ = ["ExportResult", "VisionRun", "export_backbone", "load_backbone", "read_vision_run",
           "target_description"]
