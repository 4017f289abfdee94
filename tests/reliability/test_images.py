"""Every pixel mode PIL opens decodes to the RGB values it stands for (checked against a NumPy conversion of
the stored values) or is refused naming the file and mode; a folder scan lists each image once under its
class folder, never following a link out of the data set or into a loop."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hardmix.vision.data import ImageDataError, decode_images, scan_image_folder
from hardmix.vision.images import ImageModeError, open_rgb

RNG = np.random.default_rng(27)
H, W = 6, 5


def png16(values: np.ndarray) -> bytes:
    """A 16-bit PNG of ``values`` (H, W, C) uint16, C = 1 (grey), 2 (grey+alpha), 3 (RGB), 4 (RGBA),
    written byte by byte (PIL writes no 16-bit colour PNG)."""
    h, w, c = values.shape
    raw = b"".join(b"\x00" + values[i].astype(">u2").tobytes() for i in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", w, h, 16, {1: 0, 2: 4, 3: 2, 4: 6}[c], 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def saved(im: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def over_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.float64)[..., None] / 255
    return np.round(a * rgb.astype(np.float64) + (1 - a) * 255)


def _u8(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def _case(mode: str) -> tuple[bytes, np.ndarray, int]:
    """(file bytes, the reference RGB (H, W, 3), tolerance) of an image stored in ``mode``."""
    if mode == "RGB":
        a = _u8(H, W, 3)
        return saved(Image.fromarray(a), "PNG"), a, 0
    if mode == "L":
        a = _u8(H, W)
        return saved(Image.fromarray(a), "PNG"), np.repeat(a[..., None], 3, 2), 0
    if mode == "1":
        a = _u8(H, W) > 127
        return saved(Image.fromarray(a), "PNG"), np.repeat(a[..., None] * 255, 3, 2), 0
    if mode == "P":
        palette, index = _u8(256, 3), _u8(H, W)
        im = Image.fromarray(index, mode="L").convert("P")
        im.putpalette(palette.ravel().tolist())
        return saved(im, "PNG"), palette[index], 0
    if mode == "P+transparency":
        palette, index = _u8(256, 3), _u8(H, W)
        im = Image.fromarray(index, mode="L").convert("P")
        im.putpalette(palette.ravel().tolist())
        alpha = np.where(index == index[0, 0], 0, 255)
        return saved(im, "PNG", transparency=int(index[0, 0])), over_white(palette[index], alpha), 0
    if mode == "RGBA":
        a = _u8(H, W, 4)
        return saved(Image.fromarray(a), "PNG"), over_white(a[..., :3], a[..., 3]), 1
    if mode == "LA":
        g, al = _u8(H, W), _u8(H, W)
        im = Image.merge("LA", [Image.fromarray(g), Image.fromarray(al)])
        return saved(im, "PNG"), over_white(np.repeat(g[..., None], 3, 2), al), 1
    if mode == "RGB+transparency":
        a = _u8(H, W, 3) // 2 * 2 + 1  # odd values: the transparent colour (0, 0, 0) is only where set
        a[0, 0] = 0
        alpha = np.where((a == 0).all(-1), 0, 255)
        return saved(Image.fromarray(a), "PNG", transparency=(0, 0, 0)), over_white(a, alpha), 0
    if mode == "CMYK":
        a = _u8(H, W, 4)
        c, k = a[..., :3].astype(np.float64), a[..., 3:].astype(np.float64)
        im = Image.frombytes("CMYK", (W, H), a.tobytes())
        return saved(im, "TIFF"), np.round((255 - c) * (255 - k) / 255), 0
    if mode == "YCbCr":
        a = _u8(H, W, 3).astype(np.float64)
        y, cb, cr = a[..., 0], a[..., 1] - 128, a[..., 2] - 128
        ref = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], -1)
        im = Image.frombytes("YCbCr", (W, H), a.astype(np.uint8).tobytes())
        return saved(im, "TIFF"), np.clip(np.round(ref), 0, 255), 1
    if mode in ("16-bit grey", "16-bit grey+alpha", "16-bit RGB", "16-bit RGBA"):
        channels = {"16-bit grey": 1, "16-bit grey+alpha": 2, "16-bit RGB": 3, "16-bit RGBA": 4}[mode]
        v = RNG.integers(0, 65536, (H, W, channels), dtype=np.uint16)
        eight = (v >> 8).astype(np.uint8)
        colour = np.repeat(eight[..., :1], 3, 2) if channels <= 2 else eight[..., :3]
        ref = over_white(colour, eight[..., -1]) if channels in (2, 4) else colour
        return png16(v), ref, 1
    if mode == "16-bit grey TIFF":
        v = RNG.integers(0, 65536, (H, W), dtype=np.uint16)
        return saved(Image.fromarray(v), "TIFF"), np.repeat((v >> 8)[..., None], 3, 2), 0
    raise AssertionError(mode)


DECODED = ["RGB", "L", "1", "P", "P+transparency", "RGBA", "LA", "RGB+transparency", "CMYK", "YCbCr",
           "16-bit grey", "16-bit grey+alpha", "16-bit RGB", "16-bit RGBA", "16-bit grey TIFF"]


@pytest.mark.parametrize("mode", DECODED)
def test_each_mode_decodes_to_the_rgb_it_stands_for(mode: str, tmp_path: Path) -> None:
    data, ref, tol = _case(mode)
    path = tmp_path / ("img.tif" if data[:2] in (b"II", b"MM") else "img.png")
    path.write_bytes(data)
    got = np.asarray(open_rgb(path)).astype(np.int64)
    assert got.shape == (H, W, 3)
    assert np.abs(got - ref.astype(np.int64)).max() <= tol, (got[..., 0], ref[..., 0])
    # the training cache decodes through the same function
    images, kept, _ = decode_images([str(path)], workers=1)
    assert kept == [0] and np.array_equal(images[0].permute(1, 2, 0).numpy(), got.astype(np.uint8))


@pytest.mark.parametrize("mode", ["I", "F", "LAB"])
def test_a_mode_of_unknown_range_is_refused_naming_file_and_mode(mode: str, tmp_path: Path) -> None:
    im = {"I": Image.fromarray(RNG.integers(0, 2**20, (H, W), dtype=np.int32)),
          "F": Image.fromarray(RNG.random((H, W), dtype=np.float32)),
          "LAB": Image.frombytes("LAB", (W, H), _u8(H, W, 3).tobytes())}[mode]
    path = tmp_path / "odd.tif"
    path.write_bytes(saved(im, "TIFF"))
    with pytest.raises(ImageModeError, match=rf"odd\.tif: image mode {mode} "):
        open_rgb(path)
    with pytest.raises(ImageDataError, match=rf"odd\.tif: image mode {mode} .*skip_corrupt"):
        decode_images([str(path)], workers=1, key="data")


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    a = _u8(4, 8, 3)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees clockwise to view
    path = tmp_path / "photo.png"
    path.write_bytes(saved(Image.fromarray(a), "PNG", exif=exif.tobytes()))
    assert np.array_equal(np.asarray(open_rgb(path)), np.rot90(a, k=-1))


# ------------------------------------------------------------------------------------ folder scans
def _tree(root: Path, classes: dict[str, int]) -> Path:
    for c, n in classes.items():
        (root / c).mkdir(parents=True)
        for i in range(n):
            (root / c / f"{i}.png").write_bytes(saved(Image.fromarray(_u8(4, 4, 3)), "PNG"))
    return root


def test_a_link_into_a_loop_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "train", {"a": 2, "b": 1})
    (root / "a" / "again").symlink_to(root / "a")
    with pytest.raises(ImageDataError, match=r"a/again links to .*a folder it is inside \(a loop\)"):
        scan_image_folder(root)


def test_a_folder_link_outside_the_data_set_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "train", {"a": 2})
    _tree(tmp_path / "elsewhere", {"x": 3})
    (root / "a" / "more").symlink_to(tmp_path / "elsewhere" / "x")
    with pytest.raises(ImageDataError, match=r"a/more links to .*elsewhere/x, outside the data set"):
        scan_image_folder(root)
    (root / "a" / "more").unlink()
    (root / "b").symlink_to(tmp_path / "elsewhere" / "x")
    with pytest.raises(ImageDataError, match=r"class folder .*train/b links to .*, outside the data set"):
        scan_image_folder(root)


def test_one_file_under_two_names_is_refused_naming_both(tmp_path: Path) -> None:
    root = _tree(tmp_path / "train", {"a": 2, "b": 2})
    (root / "b" / "copy.png").symlink_to(root / "a" / "1.png")
    with pytest.raises(ImageDataError, match=r"a/1\.png and .*b/copy\.png are one file"):
        scan_image_folder(root)
    (root / "b" / "copy.png").unlink()
    (root / "c").symlink_to(root / "a")  # a class folder linked under a second name
    with pytest.raises(ImageDataError, match=r"a/0\.png and .*c/0\.png are one file"):
        scan_image_folder(root)


def test_labels_are_the_class_folders_and_file_links_count_once(tmp_path: Path) -> None:
    root = _tree(tmp_path / "train", {"a": 2, "b": 3})
    _tree(tmp_path / "shared", {"z": 1})
    (root / "b" / "linked.png").symlink_to(tmp_path / "shared" / "z" / "0.png")  # a link farm is a data set
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "deep.png").write_bytes((root / "a" / "0.png").read_bytes())
    (root / "a" / "inner").symlink_to(root / "a" / "sub", target_is_directory=True)
    with pytest.raises(ImageDataError, match="are one file"):  # inner/ is sub/ again
        scan_image_folder(root)
    (root / "a" / "inner").unlink()
    images = scan_image_folder(root)
    names = [str(Path(p).relative_to(root)) for p in images.paths]
    assert names == ["a/0.png", "a/1.png", "a/sub/deep.png", "b/0.png", "b/1.png", "b/2.png", "b/linked.png"]
    assert images.labels.tolist() == [0, 0, 0, 1, 1, 1, 1] and images.classes == ["a", "b"]


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_refused_mode_stops_the_build_before_the_first_batch(pipeline: str, tmp_path: Path) -> None:
    """Both pipelines refuse the folder when its data are built, not when a batch reaches the file."""
    import torch

    from hardmix.training.api import load_config_for
    from hardmix.vision.pipeline import build_train_data
    from tests.conftest import tiny_vision_config_dict

    for c in range(2):
        folder = tmp_path / "images" / "train" / f"c{c}"
        folder.mkdir(parents=True)
        for i in range(8):
            Image.fromarray(_u8(32, 32, 3)).save(folder / f"{i}.png")
    lab = Image.frombytes("LAB", (32, 32), _u8(32, 32, 3).tobytes())
    lab.save(tmp_path / "images" / "train" / "c0" / "odd.tif")
    cfg = load_config_for("vision", tiny_vision_config_dict(
        tmp_path / "images", tmp_path / "cache", data={"num_workers": 0, "pipeline": pipeline},
        train={"batch_size": 8}))
    with pytest.raises(ImageDataError, match=r"odd\.tif: image mode LAB .*skip_corrupt"):
        build_train_data(cfg, torch.device("cpu"))


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels (its data hold one byte)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00"))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("pipeline", ["pil", "tensor"])
def test_a_decompression_bomb_is_refused_naming_the_file(pipeline: str, tmp_path: Path) -> None:
    """A PNG whose header claims 60000 x 60000 pixels (PIL's DecompressionBombError, which is not an
    OSError) stops either pipeline's build with the one line that names the file, not a traceback."""
    import torch

    from hardmix.training.api import load_config_for
    from hardmix.vision.pipeline import build_train_data
    from tests.conftest import tiny_vision_config_dict

    bomb = _png_claiming(60000, 60000)
    with pytest.raises(Image.DecompressionBombError):  # the premise: what PIL raises for it
        Image.open(__import__("io").BytesIO(bomb))
    for c in range(2):
        folder = tmp_path / "images" / "train" / f"c{c}"
        folder.mkdir(parents=True)
        for i in range(8):
            Image.fromarray(_u8(32, 32, 3)).save(folder / f"{i}.png")
    (tmp_path / "images" / "train" / "c1" / "zbomb.png").write_bytes(bomb)
    cfg = load_config_for("vision", tiny_vision_config_dict(
        tmp_path / "images", tmp_path / "cache", data={"num_workers": 0, "pipeline": pipeline},
        train={"batch_size": 8}))
    with pytest.raises(ImageDataError, match=r"cannot decode image .*zbomb\.png: .*decompression bomb"):
        build_train_data(cfg, torch.device("cpu"))
