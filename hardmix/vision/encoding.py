"""Encoding images with a trained backbone: :func:`encode` and ``hardmix encode MODEL --images FOLDER``.

``hardmix encode RUN --images FOLDER -o emb.npy`` encodes every image below FOLDER (flat or nested, class
folders or not: :func:`hardmix.vision.folders.list_all_images`, sorted depth first, hidden files skipped,
a folder link out of FOLDER or into a loop and a file under two names refused) and writes

- ``emb.npy``: an (N, D) float32 array, one row per readable image;
- ``emb.paths.txt``: the image of each row, one path a line, in row order (as listed from FOLDER: relative
  when FOLDER is), which ``hardmix neighbours emb.npy PATH`` reads (:mod:`hardmix.commands.neighbours`);
- ``emb.skipped.txt``: the images that could not be decoded;

after every image is encoded: nothing is written when the command fails.
``--output`` must end in ``.npy``; it and its listing are checked before any work
like every command's output (:func:`hardmix.cli.check_outputs`: never the model itself nor a run's file)
and are refused inside FOLDER. The array holds one row per readable image: an image that cannot be decoded
is left out, named on standard error and listed in ``emb.skipped.txt`` (one a line; empty when none).
The three files are replaced together or not at all (:func:`hardmix.commands.neighbours.write_set`), and
weights or embeddings that are not finite are refused, naming the tensors or rows.

MODEL is

- a vision run folder (its ``checkpoint.pt``: the final model) or a checkpoint file: the backbone and the
  preprocessing come from the checkpoint's config (:func:`hardmix.vision.evaluation.backbone_and_config`);
- a run's ``best/`` folder: the backbone of the step its selection score chose (``backbone.pt``) and the
  run's ``config.yaml`` beside it (:meth:`hardmix.vision.task.VisionTask.on_new_best`);
- or a backbone file of ``hardmix export vision RUN OUT`` (:mod:`hardmix.vision.export`), with ``--config
  RUN/config.yaml``: the export holds the weights only (a flat state dict, no architecture, crop size or
  normalization), so the config's ``model`` section builds the backbone (which must match the weights
  tensor by tensor) and its ``augment`` section gives the preprocessing.

The images are seen exactly as the k-NN evaluation sees them: decoded through :func:`load_tensors` at the
evaluation geometry (:func:`hardmix.vision.evaluation.eval_geometry`: the whole image at the crop size up to
64 pixels, else shorter side crop / 0.875 and a center crop), then :func:`extract_features` (the run's mean
and std, eval mode, a progress bar on standard error), in chunks of :data:`CHUNK` images so that a large
folder is never held decoded at once. Decoded chunks go through the on-disk cache
(:func:`hardmix.vision.data.default_cache_dir`, never inside FOLDER; ``--no-cache`` disables it).

The command line is the core's ``encode`` (:class:`hardmix.cli.EncodeCommand`): vision adds the
``--images`` input to it (:mod:`hardmix.vision.cli`), text the sentences of standard input.

Example:
    >>> from hardmix.vision import encode
    >>> emb, paths = encode("runs/mocov2_cifar10", "photos/", batch_size=256)  # doctest: +SKIP
    >>> emb.shape, paths[0]  # doctest: +SKIP
    ((1234, 512), 'photos/2023/a.jpg')
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hardmix.training.run_folder import CHECKPOINT, CONFIG
from hardmix.vision.config import VisionConfig

#: Images decoded and encoded at a time (a chunk of 4096 ImageNet-sized images is 0.8 GB decoded).
CHUNK = 4096


@dataclass
class EncodedImages:
    """What :func:`encode_images` gives.

    Attributes:
        embeddings: (N, D) float32, one row per readable image.
        paths: the N images, in row order.
        skipped: the images left out because they could not be decoded (``skip_corrupt``).
    """

    embeddings: np.ndarray
    paths: list[str]
    skipped: list[str] = field(default_factory=list)


def _as_config(config: VisionConfig | dict[str, Any] | str | os.PathLike[str]) -> VisionConfig:
    from hardmix.config.loader import build_config, load_config

    if isinstance(config, VisionConfig):
        return config
    if isinstance(config, dict):
        return build_config(VisionConfig, config)
    return load_config(VisionConfig, config)


def _read_weights(path: Path) -> Any:
    """``torch.load`` a file safely (``weights_only``); one line naming it when it cannot be read."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError:
        raise
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, RuntimeError, OSError, ValueError,
            AttributeError, TypeError, ImportError, IndexError, KeyError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise ValueError(f"MODEL: {path} is neither a vision run's checkpoint nor a backbone file of hardmix "
                         f"export vision (loading it safely failed: {first})") from None


#: The backbone file of a run's ``best/`` folder.
BEST_WEIGHTS = "backbone.pt"


def load_encoder(
    model_or_path: nn.Module | str | os.PathLike[str],
    config: VisionConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, VisionConfig]:
    """The backbone (eval mode, on ``device``) and the config whose preprocessing it sees images with.

    Args:
        model_or_path: a vision run folder or checkpoint file; a backbone file of ``hardmix export vision``
            (then ``config`` is needed); or a backbone module (B, 3, H, W) -> (B, D) (``config`` needed).
        config: for an exported file or a module: a :class:`VisionConfig`, its dict, or a YAML file (the
            run's ``config.yaml``); its ``model`` section builds an exported file's backbone, its
            ``augment`` section gives the crop size, mean and std. Refused with a run or checkpoint, which
            carries its own.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: a config missing or given where it does not belong, weights that do not match the
            config's backbone, a file of another kind; one line naming the path.
    """
    from hardmix.training.checkpoint import FORMAT
    from hardmix.vision.evaluation import backbone_and_config, checked_backbone

    if isinstance(model_or_path, nn.Module):
        if config is None:
            raise ValueError("config: a backbone module needs the config of its preprocessing (crop size, "
                             "mean, std): pass config=")
        return model_or_path.to(device).eval(), _as_config(config)
    if not isinstance(model_or_path, (str, os.PathLike)):
        raise TypeError(f"encode: expected a run folder, a checkpoint or backbone file or an nn.Module, got "
                        f"{type(model_or_path).__name__}")
    path = Path(model_or_path)
    if not path.exists():
        raise FileNotFoundError(f"MODEL: {path} does not exist")
    if path.is_dir() and (path / BEST_WEIGHTS).is_file() and not (path / CHECKPOINT).exists():
        if config is not None:  # RUN/best: the selected step's backbone beside its run's config
            raise ValueError(f"--config: MODEL {path} holds its own config.yaml beside {BEST_WEIGHTS}")
        config, path = path / CONFIG, path / BEST_WEIGHTS
        if not config.is_file():
            raise FileNotFoundError(f"MODEL: {config} does not exist (a run's best/ holds {BEST_WEIGHTS} "
                                    "and config.yaml)")
    if path.is_dir() and not (path / CHECKPOINT).exists() and \
            any((path / n).is_file() for n in ("config.json", "modules.json", "hardmix.json")):
        raise ValueError(f"MODEL: {path} is a text model folder (config.json or modules.json), not a vision "
                         "run: --images needs a vision run, its checkpoint, its best/ or a backbone file of "
                         "hardmix export vision; a text model encodes sentences from standard input")
    state = None if path.is_dir() else _read_weights(path)
    if path.is_dir() or (isinstance(state, dict) and state.get("format") == FORMAT):
        if config is not None:
            raise ValueError(f"--config: MODEL {path} is a vision run (or its checkpoint), which carries its "
                             "own config; --config goes with a backbone file of hardmix export vision")
        return backbone_and_config(path, device)
    if not (isinstance(state, dict) and state and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise ValueError(f"MODEL: {path} is neither a vision run's checkpoint nor a backbone file of hardmix "
                         "export vision")
    if config is None:
        raise ValueError(f"MODEL: {path} is a backbone file of hardmix export vision, which holds the "
                         "weights only (no architecture, crop size, mean or std): pass --config with its "
                         "run's config.yaml")
    cfg = _as_config(config)
    m = cfg.model
    try:
        net = checked_backbone(m.backbone, m.width, m.small_stem, state, f"MODEL {path}")
    except ValueError as e:
        raise ValueError(f"{e} (the backbone of --config's model section: {m.backbone}, width {m.width}, "
                         f"small_stem {m.small_stem})") from None
    return net.to(device).eval(), cfg


def image_paths(images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                key: str = "--images") -> list[str]:
    """The images to encode: every image below a folder (:func:`hardmix.vision.folders.list_all_images`),
    or the given files, in their order.

    Raises:
        FileNotFoundError: a folder that does not exist (or is a file).
        ValueError: no image in it, a folder link out of it or into a loop, one file under two names, a
            path with a line break (the listing holds one path a line).
    """
    from hardmix.commands.neighbours import format_listing
    from hardmix.vision.folders import IMG_EXTENSIONS, list_all_images

    if isinstance(images, (str, os.PathLike)):
        folder = Path(images)
        if not folder.is_dir():
            raise FileNotFoundError(f"{key}: {folder} is a file, not a folder of images" if folder.exists()
                                    else f"{key}: {folder} does not exist")
        paths = list_all_images(folder, key)
        if not paths:
            raise ValueError(f"{key}: {folder} holds no images (extensions: {', '.join(IMG_EXTENSIONS)})")
    else:
        paths = [os.fspath(p) for p in images]
        if not paths:
            raise ValueError(f"{key}: no images given")
    try:
        format_listing(paths)
    except ValueError as e:
        raise ValueError(f"{key}: {e}; rename the file") from None
    return paths


def _cache_folder(cache_dir: str | None, images: Any) -> str | None:
    """The decode cache's folder: ``cache_dir`` ("" disables it; None: the default), never inside the
    images' folder (disabled there)."""
    from hardmix.vision.data import default_cache_dir

    if cache_dir == "" or not isinstance(images, (str, os.PathLike)):
        return cache_dir
    folder = os.path.realpath(cache_dir or default_cache_dir())
    root = os.path.realpath(images)
    return "" if folder == root or folder.startswith(root.rstrip(os.sep) + os.sep) else cache_dir


def encode_images(
    model_or_path: nn.Module | str | os.PathLike[str],
    images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    batch_size: int = 128,
    device: str | torch.device | None = None,
    config: VisionConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    skip_corrupt: bool = False,
    cache_dir: str | None = None,
    workers: int = 4,
    progress: bool = True,
    key: str = "--images",
    skip_hint: str = "pass skip_corrupt=True",
    chunk: int = CHUNK,
) -> EncodedImages:
    """:func:`encode`, with the skipped images too (see there for the other arguments).

    Args:
        key: the option named in errors.
        skip_hint: how the caller asks for ``skip_corrupt`` (the command line: ``pass --skip-corrupt``).
        chunk: images decoded and encoded at a time.
    """
    from hardmix.training.checkpoint import check_finite_weights
    from hardmix.vision.data import ImageDataError, ImageList, load_tensors
    from hardmix.vision.evaluation import eval_geometry, extract_features

    if batch_size < 1:
        raise ValueError(f"batch_size: expected a positive number, got {batch_size}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    paths = image_paths(images, key)
    net, cfg = load_encoder(model_or_path, config, device)
    source = f"MODEL {os.fspath(model_or_path)}" if isinstance(model_or_path, (str, os.PathLike)) else \
        "the backbone"
    check_finite_weights(net.state_dict(), source)
    resolution, crop = eval_geometry(cfg)
    cache = _cache_folder(cache_dir, images)
    folder = Path(images) if isinstance(images, (str, os.PathLike)) else Path(".")
    chunks = range(0, len(paths), chunk)
    rows: list[np.ndarray] = []
    kept: list[str] = []
    skipped: list[str] = []
    for n, start in enumerate(chunks, 1):
        part = paths[start : start + chunk]
        listing = ImageList(folder, part, torch.zeros(len(part), dtype=torch.long), [])
        try:
            decoded = load_tensors(listing, None, resolution, cache, skip_corrupt, workers, key=key,
                                   skip_hint=skip_hint)
        except ImageDataError:
            if not skip_corrupt:
                raise
            skipped += part  # with skip_corrupt, only a chunk with no readable image at all gets here
            continue
        gone = set(decoded.skipped)
        skipped += decoded.skipped
        kept += [p for p in part if p not in gone]
        desc = "encode" if len(chunks) == 1 else f"encode {n}/{len(chunks)}"
        a = cfg.augment
        rows.append(extract_features(net, decoded.images, a.mean, a.std, batch_size, device, crop, progress,
                                     desc).numpy())
    if not kept:
        raise ImageDataError(f"{key}: no image could be decoded ({len(skipped)} skipped)")
    return EncodedImages(np.concatenate(rows).astype(np.float32, copy=False), kept, skipped)


def encode(
    model_or_path: nn.Module | str | os.PathLike[str],
    images: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    batch_size: int = 128,
    device: str | torch.device | None = None,
    config: VisionConfig | dict[str, Any] | str | os.PathLike[str] | None = None,
    skip_corrupt: bool = False,
    cache_dir: str | None = None,
    workers: int = 4,
    progress: bool = True,
) -> tuple[np.ndarray, list[str]]:
    """Embed images with a trained backbone, as the k-NN evaluation sees them.

    Args:
        model_or_path: a vision run folder or checkpoint file, a backbone file of ``hardmix export vision``
            (with ``config``), or a backbone module (with ``config``): see :func:`load_encoder`.
        images: a folder (every image below it, flat or nested, sorted depth first, hidden files skipped)
            or a sequence of image files.
        batch_size: images per forward pass.
        device: where the backbone runs (default: cuda when available, else cpu).
        config: the preprocessing (and an exported file's architecture): a :class:`VisionConfig`, its dict
            or a YAML file such as the run's ``config.yaml``; not with a run or checkpoint.
        skip_corrupt: leave images that cannot be decoded out instead of stopping.
        cache_dir: the decode cache's folder (None: ``$HARDMIX_CACHE/vision`` or ``~/.cache/hardmix/vision``;
            "" disables it; never used inside the images' folder).
        workers: decoding threads.
        progress: progress bars on standard error.

    Returns:
        (embeddings (N, D) float32, the N image paths in row order).

    Raises:
        FileNotFoundError, ValueError: one line naming the path or option (an undecodable image names the
            file: :class:`hardmix.vision.data.ImageDataError`).
    """
    out = encode_images(model_or_path, images, batch_size, device, config, skip_corrupt, cache_dir, workers,
                        progress)
    return out.embeddings, out.paths


def save_encoded(result: EncodedImages, output: str | os.PathLike[str]) -> Path:
    """Write ``output`` (the (N, D) array, ``.npy``), its listing ``<output>.paths.txt`` and the images
    left out, ``<output>.skipped.txt`` (one a line; empty when none), replaced together or not at all
    (:func:`hardmix.commands.neighbours.write_set`); returns the listing's path."""
    return save_encoded_noting(result, output)[0]


def save_encoded_noting(result: EncodedImages, output: str | os.PathLike[str]) -> tuple[Path, str]:
    """:func:`save_encoded`, with the note of the stale temporary files it removed (empty when none)."""
    from hardmix.commands.neighbours import write_set

    return write_set(output, result.embeddings, "paths", result.paths, result.skipped)


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix encode MODEL --images FOLDER -o OUT.npy [--config YAML] [--device D] [--batch-size N]
    [--no-cache]`` (the input and its checks: :mod:`hardmix.vision.cli`): one row per readable image; each
    image that cannot be decoded is named on standard error and listed in ``OUT.skipped.txt``."""
    from hardmix.commands.neighbours import skipped_path

    result = encode_images(args.model, args.images, args.batch_size, args.device, args.config,
                           True, "" if args.no_cache else None, key="--images")
    listing, note = save_encoded_noting(result, args.output)
    if note:
        print(f"hardmix: note: {note}", file=sys.stderr)
    for path in result.skipped:
        print(f"hardmix: skipped {path}: it cannot be decoded as an image", file=sys.stderr)
    from hardmix.training.run_folder import unfinished_note

    if (note := unfinished_note(args.model)) is not None:  # as export says it
        print(f"hardmix: note: {note}", file=sys.stderr)
    if result.skipped:
        print(f"hardmix: skipped {len(result.skipped)} image(s) that could not be decoded, listed in "
              f"{skipped_path(args.output)}", file=sys.stderr)
    n, dim = result.embeddings.shape
    print(f"hardmix: encoded {n} images to {dim} dimensions: {args.output}, paths in {listing}",
          file=sys.stderr)
    return 0


__all__ = ["CHUNK", "EncodedImages", "encode", "encode_images", "image_paths", "load_encoder", "save_encoded",
           "save_encoded_noting"]
