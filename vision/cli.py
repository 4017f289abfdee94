"""Registers the vision task's subcommands, ``eval knn`` and ``eval linear`` (the ``hardmix.cli`` entry
point; ``hardmix train vision`` is the engine's).

Heavy imports (torchvision, timm) happen inside the handlers.
"""

from __future__ import annotations

import argparse

from hardmix.cli import lazy_command


def _check(args: argparse.Namespace) -> None:
    from hardmix.config import check_options

    check_options(args, positive=("k", "temperature", "batch_size", "epochs", "max_train_samples",
                                  "max_test_samples"), devices=("device",))


def register(top, evaluate, export) -> None:  # noqa: ANN001 (argparse subparser actions)
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
