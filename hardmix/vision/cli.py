"""Registers the vision task's subcommands, ``eval knn``, ``eval linear``, ``export vision`` and the
``--images`` input of ``encode`` (the ``hardmix.cli`` entry point; ``hardmix train vision`` is the engine's).

``hardmix encode MODEL --images FOLDER -o OUT.npy`` (:mod:`hardmix.vision.encoding`) is the core's
``encode`` command (:class:`hardmix.cli.EncodeCommand`), to which vision adds its input and options.

Heavy imports (torchvision, timm) happen inside the handlers.
"""

from __future__ import annotations

import argparse
import os

from hardmix.cli import EncodeCommand, lazy_command


def _check(args: argparse.Namespace) -> None:
    from hardmix.config.loader import check_options

    check_options(args, positive=("k", "temperature", "batch_size", "epochs", "max_train_samples",
                                  "max_test_samples"), devices=("device",))


def _inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _check_encode(args: argparse.Namespace) -> None:
    """Before any model or image is read: the numbers and device, an ``--output`` ending in ``.npy``, an
    ``--images`` folder that exists, and neither the output nor its listing (``OUT.paths.txt``) inside that
    folder, nor one of the command's inputs (:func:`hardmix.cli.check_output_beside`).

    Example:
        >>> _check_encode(argparse.Namespace(batch_size=8, device=None, output=None, images="photos"))
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.ConfigError: --output: encoding images writes OUT.npy and OUT.paths.txt: ...
    """
    from hardmix.cli import check_output_beside
    from hardmix.commands.neighbours import listing_path, skipped_path
    from hardmix.config.loader import check_options
    from hardmix.utils.errors import ConfigError

    check_options(args, positive=("batch_size",), devices=("device",))
    out = args.output
    if not out or out == "-":
        raise ConfigError("--output: encoding images writes OUT.npy and OUT.paths.txt: pass -o OUT.npy")
    if not str(out).endswith(".npy"):
        raise ConfigError(f"--output: {out} does not end in .npy (hardmix neighbours reads .npy arrays)")
    if not os.path.isdir(args.images):
        raise FileNotFoundError(f"--images: {args.images} is a file, not a folder of images"
                                if os.path.exists(args.images) else f"--images: {args.images} does not exist")
    listing = listing_path(out, "paths")
    for path in (out, listing):
        if _inside(path, args.images):
            raise ConfigError(f"--output: {path} is inside the image folder {args.images} (--images), which "
                              "this command reads; write elsewhere")
    check_output_beside(args, listing)
    check_output_beside(args, skipped_path(out))


def register(top, evaluate, export, encode: EncodeCommand | None = None) -> None:  # noqa: ANN001 (argparse)
    for name, func, helptext in (
        ("knn", lazy_command("hardmix.vision.evaluation:knn_cli_main", _check),
         "weighted k-NN accuracy of frozen backbone features"),
        ("linear", lazy_command("hardmix.vision.evaluation:linear_cli_main", _check),
         "linear-probe accuracy of frozen backbone features"),
    ):
        p = evaluate.add_parser(name, help=helptext)
        p.add_argument("checkpoint", help="a run directory (its last checkpoint) or a checkpoint file")
        p.add_argument(
            "--dataset",
            required=True,
            help="cifar10, imagenette-64 (under the data root) or an ImageFolder root",
        )
        p.add_argument("--json", dest="json_out", default=None, help="write the scores to this JSON file")
        p.add_argument("--batch-size", type=int, default=256)
        p.add_argument("--skip-corrupt", action="store_true",
                       help="leave images that cannot be decoded out (counted) instead of stopping")
        p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
        p.add_argument(
            "--max-train-samples",
            type=int,
            default=None,
            metavar="N",
            help="a class-balanced subset of the train split (for CPU-sized runs)",
        )
        p.add_argument(
            "--max-test-samples",
            type=int,
            default=None,
            metavar="N",
            help="a class-balanced subset of the test split",
        )
        if name == "knn":
            p.add_argument("--k", type=int, default=200)
            p.add_argument("--temperature", type=float, default=0.1)
        else:
            p.add_argument("--epochs", type=int, default=None, help="default: the recipe's for the dataset")
            p.add_argument(
                "--augment",
                action="store_true",
                help="train on random resized crops and flips of the training images, drawn each epoch "
                "(the recipes' protocol; one backbone forward per image per epoch) instead of on the "
                "un-augmented features computed once",
            )
        p.set_defaults(func=func)

    p = export.add_parser("vision", help="write a run's backbone as a torchvision/timm state dict file")
    p.add_argument("run", metavar="RUN", help="a vision run folder (or its checkpoint file)")
    p.add_argument("out", metavar="OUT", help="the file to write (e.g. resnet18_mochi.pt)")
    p.set_defaults(func=lazy_command("hardmix.vision.export:cmd_export"))

    if encode is not None:
        g = encode.add_input(
            "images", lazy_command("hardmix.vision.encoding:cli_main", _check_encode), option="--images",
            metavar="FOLDER",
            help="encode every image below FOLDER (flat or nested, class folders or not; sorted depth first, "
                 "hidden files skipped), MODEL a vision run folder (or its checkpoint file) or, with "
                 "--config, a backbone file of hardmix export vision; writes -o OUT.npy, OUT.paths.txt "
                 "(the image of each row) and OUT.skipped.txt (the images that could not be decoded)")
        g.add_argument("--config", default=None, metavar="YAML",
                       help="with an exported backbone file: its run's config.yaml (the backbone it was "
                            "built as, and the crop size, mean and std its images are seen with)")
        g.add_argument("--skip-corrupt", action="store_true",
                       help="(the default now, kept for older scripts: each image that cannot be decoded is "
                            "left out, named, and listed in OUT.skipped.txt)")
        g.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
        g.add_argument("--no-cache", action="store_true",
                       help="decode without the on-disk cache of decoded images ($HARDMIX_CACHE/vision)")
