"""The ``hardmix`` command line.

Subcommands: ``strategies``, ``train text|vision``, ``eval text|knn|linear``, ``encode``,
``data download|list|check`` (:mod:`hardmix.datasets.cli`) and ``export vision``. The text and
vision trainers register their own subcommands (``hardmix.text.cli`` and ``hardmix.vision.cli``) and
import their heavy dependencies only when their command runs.
"""

from __future__ import annotations

import argparse
import sys

from hardmix import __version__


def _cmd_strategies(args: argparse.Namespace) -> int:
    from hardmix.strategies import describe_strategies

    print(describe_strategies())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hardmix",
        description="Contrastive representation learning with feature-space hard-negative mixing.",
    )
    parser.add_argument("--version", action="version", version=f"hardmix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("strategies", help="list the registered mixing strategies and their parameters")
    p.set_defaults(func=_cmd_strategies)

    train = sub.add_parser("train", help="train an encoder (text or vision)")
    train_sub = train.add_subparsers(dest="modality", metavar="MODALITY", required=True)
    evaluate = sub.add_parser("eval", help="evaluate an encoder (text, knn, linear)")
    eval_sub = evaluate.add_subparsers(dest="task", metavar="TASK", required=True)

    export = sub.add_parser("export", help="export a trained encoder for other libraries (vision)")
    export_sub = export.add_subparsers(dest="export_kind", metavar="KIND", required=True)

    from hardmix.datasets.cli import register as register_data
    from hardmix.text.cli import register as register_text
    from hardmix.vision.cli import register as register_vision
    from hardmix.vision.export import register as register_vision_export

    register_text(top=sub, train=train_sub, evaluate=eval_sub)
    register_vision(top=sub, train=train_sub, evaluate=eval_sub)
    register_data(sub)
    register_vision_export(export_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from hardmix.config import ConfigError

    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        print(f"hardmix: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
