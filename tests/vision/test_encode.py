"""``hardmix encode MODEL --images FOLDER -o OUT.npy`` and ``hardmix.vision.encode``: a tiny run trained for
2 steps encodes 40 real CIFAR-10 test images copied into nested folders without classes (plus one image of
another size, one corrupt file, a hidden image and a text file); the rows equal the k-NN feature pass
(``extract_features``) of images the test lists and decodes itself, the listing follows the rows, a
corrupt file is refused (nothing written) or skipped and counted, an exported backbone with its run's
config gives the same rows, and outputs inside the image folder or over the model are refused in one
line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import hardmix.vision
from hardmix.cli import main
from hardmix.config.loader import build_config
from hardmix.training import run_training
from hardmix.vision.config import VisionConfig
from hardmix.vision.evaluation import backbone_and_config, extract_features
from hardmix.vision.task import VisionTask
from tests.conftest import require_data_path

pytestmark = [pytest.mark.data, pytest.mark.usefixtures("vision_one_thread")]

EXTENSIONS = (".jpg", ".jpeg", ".png")


@pytest.fixture(scope="module")
def run(tiny_vision_config, tmp_path_factory) -> Path:
    """A vision run folder of 2 training steps (tiny ResNet-10, width 8, small stem, crop 32)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("encode-run") / "run"
    cfg = build_config(VisionConfig, tiny_vision_config(train={"max_steps": 2}))
    run_training(VisionTask, cfg, out, False)
    torch.set_num_threads(before)
    return out


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """40 real CIFAR-10 test images of every class, copied into folders whose names mean nothing (some at the
    top), one of them saved again at 48 x 40 pixels, a corrupt ``.jpg``, a hidden image and a text file."""
    from PIL import Image

    src = require_data_path("images", "cifar10", "test")
    root = tmp_path_factory.mktemp("encode-photos") / "photos"
    for i, f in enumerate(sorted(src.glob("*/*.jpg"))[::50][:40]):
        d = [root, root / "2024" / "june", root / "2024", root / "b-side"][i % 4]
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, d / f"p{i:02d}.jpg")
    Image.open(root / "p00.jpg").convert("RGB").resize((48, 40)).save(root / "2024" / "wide.png")
    (root / "b-side" / "broken.jpg").write_bytes(b"not a jpeg at all")
    shutil.copyfile(root / "p04.jpg", root / "2024" / ".hidden.jpg")
    (root / "notes.txt").write_text("not an image\n")
    return root


def _listed(folder: Path) -> list[str]:
    """Every image below ``folder``, names sorted at each level, depth first, hidden entries skipped."""
    out = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            out += _listed(Path(entry.path))
        elif entry.name.lower().endswith(EXTENSIONS):
            out.append(entry.path)
    return out


def _reference(run: Path, paths: list[str]) -> np.ndarray:
    """The k-NN evaluation's feature pass on images decoded here: PIL, shorter side resized to the crop and
    center-cropped (the evaluation geometry of a 32 pixel crop), then ``extract_features``."""
    from PIL import Image
    from torchvision.transforms import functional as TF

    backbone, cfg = backbone_and_config(run)
    side = cfg.augment.crop_size
    images = []
    for p in paths:
        im = TF.center_crop(TF.resize(Image.open(p).convert("RGB"), side), [side, side])
        images.append(torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1))
    feats = extract_features(backbone, torch.stack(images), cfg.augment.mean, cfg.augment.std, batch_size=7,
                             progress=False)
    return feats.numpy()


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("hardmix: error:")]
    assert len(lines) == 1 and err.rstrip("\n").endswith(lines[0]), err
    return lines[0]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The decode cache in the test's folder (never the home folder)."""
    monkeypatch.setenv("HARDMIX_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "vision"


def test_rows_are_the_knn_feature_pass_and_the_listing_follows_them(run, photos, tmp_path, cache, capsys):
    out = tmp_path / "out" / "emb.npy"
    out.parent.mkdir()
    assert main(["encode", str(run), "--images", str(photos), "-o", str(out), "--skip-corrupt",
                 "--batch-size", "16", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 image(s)" in err and "broken.jpg" in err and "encoded 41 images" in err
    expected = [p for p in _listed(photos) if not p.endswith("broken.jpg")]
    assert len(expected) == 41 and any(p.endswith("wide.png") for p in expected)
    assert not any(".hidden" in p for p in expected)
    paths = (out.parent / "emb.paths.txt").read_text(encoding="utf-8").splitlines()
    assert paths == expected
    emb = np.load(out)
    assert emb.dtype == np.float32 and emb.shape == (41, 64)  # ResNet-10 at width 8: 8 x 8 channels
    np.testing.assert_allclose(emb, _reference(run, expected), atol=1e-5)
    assert sorted(p.name for p in out.parent.iterdir()) == ["emb.npy", "emb.paths.txt", "emb.skipped.txt"]
    assert (out.parent / "emb.skipped.txt").read_text() == f"{photos / 'b-side' / 'broken.jpg'}\n"
    assert any(cache.iterdir())  # the decoded images were cached there, not in the image folder
    assert not any(p.suffix == ".pt" for p in photos.rglob("*"))

    # the Python API gives the same rows and paths (a list of files keeps its order)
    emb2, paths2 = hardmix.vision.encode(run, photos, batch_size=5, device="cpu", skip_corrupt=True,
                                         cache_dir="", progress=False)
    assert paths2 == expected
    np.testing.assert_allclose(emb2, emb, atol=1e-5)
    few = expected[::-1][:3]
    emb3, paths3 = hardmix.vision.encode(run, few, device="cpu", cache_dir="", progress=False)
    assert paths3 == few
    np.testing.assert_allclose(emb3, emb[[expected.index(p) for p in few]], atol=1e-5)

    # hardmix neighbours on the images: the ranking of a NumPy brute force
    unit = emb.astype(np.float64) / np.linalg.norm(emb.astype(np.float64), axis=1, keepdims=True)
    sims = unit @ unit[5]
    sims[5] = -np.inf
    ranked = np.argsort(-sims, kind="stable")[:4]
    assert main(["neighbours", str(out), expected[5], "-k", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"query #5: {expected[5]}"
    got = [ln.split("\t") for ln in lines[1:]]
    assert [g[2] for g in got] == [expected[i] for i in ranked]
    np.testing.assert_allclose([float(g[1]) for g in got], sims[ranked], atol=1e-4)


def test_chunks_give_the_same_rows_even_when_a_whole_chunk_is_corrupt(run, photos, tmp_path):
    """Images are decoded and encoded a chunk at a time; a chunk none of whose images decodes is skipped
    whole under skip_corrupt (and stops the encoding without it, naming its first file)."""
    from hardmix.vision.data import ImageDataError
    from hardmix.vision.encoding import encode_images

    good = [p for p in _listed(photos) if not p.endswith("broken.jpg")][:7]
    broken = []
    for i in range(3):
        broken.append(str(tmp_path / f"broken{i}.jpg"))
        Path(broken[-1]).write_bytes(b"\xff\xd8 truncated")
    paths = good[:3] + broken + good[3:]
    got = encode_images(run, paths, batch_size=2, device="cpu", skip_corrupt=True, cache_dir="",
                        progress=False, chunk=3)
    assert got.paths == good and got.skipped == broken
    np.testing.assert_allclose(got.embeddings, _reference(run, good), atol=1e-5)
    with pytest.raises(ImageDataError, match="broken0.jpg"):
        encode_images(run, paths, device="cpu", cache_dir="", progress=False, chunk=3)
    with pytest.raises(ImageDataError, match="no image could be decoded"):
        encode_images(run, broken, device="cpu", skip_corrupt=True, cache_dir="", progress=False, chunk=2)


def test_each_corrupt_image_is_skipped_named_and_listed_beside_its_array(run, photos, tmp_path, cache,
                                                                         capsys):
    """One row per readable image, with or without --skip-corrupt (once the first corrupt file stopped the
    command): each file skipped is named on standard error and listed in OUT.skipped.txt."""
    import shutil

    photos = Path(shutil.copytree(photos, tmp_path / "photos"))
    broken = photos / "b-side" / "broken.jpg"
    second = photos / "zz-empty.png"
    second.write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["encode", str(run), "--images", str(photos), "-o", str(out / "emb.npy"), "--device",
                 "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"hardmix: skipped {broken}: it cannot be decoded" in err
    assert f"hardmix: skipped {second}: it cannot be decoded" in err
    assert (out / "emb.skipped.txt").read_text().splitlines() == [str(broken), str(second)]
    paths = (out / "emb.paths.txt").read_text().splitlines()
    assert str(broken) not in paths and str(second) not in paths
    assert np.load(out / "emb.npy").shape[0] == len(paths) == len(_listed(photos)) - 2


def test_an_exported_backbone_with_its_runs_config_gives_the_runs_rows(run, photos, tmp_path, cache, capsys):
    backbone = tmp_path / "backbone.pt"
    assert main(["export", "vision", str(run), str(backbone)]) == 0
    few = [p for p in _listed(photos) if not p.endswith("broken.jpg")][:12]
    from_run, _ = hardmix.vision.encode(run, few, device="cpu", cache_dir="", progress=False)
    assert main(["encode", str(backbone), "--config", str(run / "config.yaml"), "--images", str(photos),
                 "-o", str(tmp_path / "b.npy"), "--skip-corrupt", "--no-cache"]) == 0
    exported = np.load(tmp_path / "b.npy")
    paths = (tmp_path / "b.paths.txt").read_text(encoding="utf-8").splitlines()
    np.testing.assert_allclose(exported[[paths.index(p) for p in few]], from_run, atol=1e-6)
    capsys.readouterr()

    # without the config: refused, naming --config; with another model section: the first mismatch
    assert main(["encode", str(backbone), "--images", str(photos), "-o", str(tmp_path / "c.npy")]) == 2
    assert "--config" in _error_line(capsys.readouterr().err)
    other = yaml.safe_load((run / "config.yaml").read_text())
    other["model"]["width"] = 16
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    assert main(["encode", str(backbone), "--config", str(tmp_path / "other.yaml"), "--images", str(photos),
                 "-o", str(tmp_path / "c.npy")]) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(backbone) in line and "does not match the model" in line and "width 16" in line
    assert not (tmp_path / "c.npy").exists() and not (tmp_path / "c.paths.txt").exists()


@pytest.mark.parametrize("case", ["inside-images", "via-a-link", "checkpoint", "exported-model",
                                  "not-npy", "no-output", "text-option", "missing-folder"])
def test_bad_outputs_and_options_are_refused_in_one_line(case, run, photos, tmp_path, capsys):
    backbone = tmp_path / "backbone.pt"
    model, extra = str(run), []
    out = str(tmp_path / "emb.npy")
    images = str(photos)
    expect: tuple[str, ...]
    if case == "inside-images":
        out = str(photos / "2024" / "emb.npy")
        expect = (out, "is inside", "a folder this command reads (IMAGES)")
    elif case == "via-a-link":  # a link to the image folder: the output resolves inside it
        (tmp_path / "link").symlink_to(photos)
        out = str(tmp_path / "link" / "emb.npy")
        expect = ("is inside", "a folder this command reads (IMAGES)")
    elif case == "checkpoint":
        out = str(run / "checkpoint.pt")
        expect = ("--output", out, "this command's own input")
    elif case == "exported-model":
        from hardmix.vision.export import export_backbone

        export_backbone(run, backbone)
        model, out, extra = str(backbone), str(backbone), ["--config", str(run / "config.yaml")]
        expect = ("--output", str(backbone), "this command's own input")
    elif case == "not-npy":
        out = str(tmp_path / "emb.txt")
        expect = ("--output", out, ".npy")
    elif case == "no-output":
        out, expect = "", ("--output", "-o OUT.npy")
    elif case == "text-option":
        extra, expect = ["--pooling", "avg"], ("--pooling", "sentences", "not of --images")
    else:
        images = str(tmp_path / "nothing-here")
        expect = ("--images", images, "does not exist")
    before = {p: p.stat().st_mtime_ns for p in [*photos.rglob("*"), *run.iterdir()]}
    argv = ["encode", model, "--images", images, *(["-o", out] if out else []), *extra]
    assert main(argv) == 2
    line = _error_line(capsys.readouterr().err)
    for part in expect:
        assert part in line, (part, line)
    assert {p: p.stat().st_mtime_ns for p in [*photos.rglob("*"), *run.iterdir()]} == before
    assert not (tmp_path / "emb.npy").exists() and not (tmp_path / "emb.paths.txt").exists()
