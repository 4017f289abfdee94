"""Backbones out: ``hardmix export vision RUN OUT`` writes the query backbone under torchvision's (or
timm's) key names, and ``hardmix.vision.load_backbone(RUN)`` gives the same features."""

from __future__ import annotations

import pytest
import torch
import yaml

import hardmix.vision
from hardmix.cli import main
from hardmix.training.checkpoint import save_checkpoint
from hardmix.vision.backbones import build_backbone
from hardmix.vision.export import export_backbone, read_vision_run
from hardmix.vision.moco import MoCo


def _run_folder(path, backbone, width=64, small_stem=False):
    """A vision run folder as the engine writes it: checkpoint.pt with the config and the MoCo state dict."""
    torch.manual_seed(0)
    net, dim = build_backbone(backbone, width, small_stem)
    moco = MoCo(net, dim, proj_hidden=32, proj_dim=16, queue_size=32, bn_splits=2)
    moco.train()
    with torch.no_grad():
        moco.encoder_q(torch.randn(4, 3, 32, 32) * 2 + 0.5)  # BatchNorm running statistics move off 0 / 1
    path.mkdir()
    model_cfg = {"backbone": backbone, "width": width, "small_stem": small_stem, "bn_splits": 2}
    config = {"model": model_cfg, "train": {"epochs": 1}}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    state = {"model": moco.state_dict(), "step": 3, "config": config}
    save_checkpoint(state, path / "checkpoint.pt", "vision")
    return moco.encoder_q.backbone.eval()


def test_resnet18_export_loads_into_torchvision_and_gives_the_same_features(tmp_path, capsys,
                                                                              one_torch_thread):
    import torchvision

    trained = _run_folder(tmp_path / "run", "resnet18")
    out = tmp_path / "resnet18_moco.pt"
    assert main(["export", "vision", str(tmp_path / "run"), str(out)]) == 0
    assert "torchvision.models.resnet18()" in capsys.readouterr().out
    state = torch.load(out, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    assert not any(k.startswith(("projector", "fc.", "encoder_")) for k in state)
    net = torchvision.models.resnet18()
    result = net.load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == ["fc.bias", "fc.weight"] and result.unexpected_keys == []
    net.fc = torch.nn.Identity()
    net.eval()
    x = torch.randn(3, 3, 32, 32)
    loaded = hardmix.vision.load_backbone(tmp_path / "run")
    with torch.no_grad():
        feats = loaded(x)
        assert feats.shape == (3, 512)
        torch.testing.assert_close(net(x), feats)
        torch.testing.assert_close(trained(x), feats)


def test_timm_backbone_export_loads_into_timm_create_model(tmp_path, one_torch_thread):
    import timm

    _run_folder(tmp_path / "run", "timm:resnet10t")
    res = export_backbone(tmp_path / "run", tmp_path / "b.pt")
    assert res.target == "timm.create_model('resnet10t')"
    net = timm.create_model("resnet10t", pretrained=False)
    result = net.load_state_dict(torch.load(res.path, weights_only=True), strict=False)
    assert sorted(result.missing_keys) == ["fc.bias", "fc.weight"] and result.unexpected_keys == []


def test_small_stem_checkpoint_round_trips(tmp_path):
    trained = _run_folder(tmp_path / "run", "resnet10", width=8, small_stem=True)
    info = read_vision_run(tmp_path / "run")
    assert (info.backbone, info.width, info.small_stem, info.checkpoint.name) == ("resnet10", 8, True,
                                                                                  "checkpoint.pt")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(hardmix.vision.load_backbone(tmp_path / "run")(x), trained(x))
    assert "build_backbone('resnet10', width=8, small_stem=True)" in export_backbone(
        tmp_path / "run", tmp_path / "b.pt").target


def test_a_folder_without_a_checkpoint_is_one_line(tmp_path, capsys):
    assert main(["export", "vision", str(tmp_path), str(tmp_path / "o.pt")]) == 2
    err = capsys.readouterr().err
    assert "holds no checkpoint.pt" in err and err.count("\n") == 1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_vision_run(tmp_path / "nope")
