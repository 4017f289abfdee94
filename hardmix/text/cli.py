"""Registers the text task's subcommands, ``eval text`` and the sentences input of ``encode`` (the
``hardmix.cli`` entry point; ``hardmix train text`` is the engine's).

``hardmix encode MODEL`` is the core's command (:class:`hardmix.cli.EncodeCommand`, shared with the images
of :mod:`hardmix.vision.cli`); text adds its input, sentences on standard input, with ``--pooling`` and
``--max-length``.

Heavy imports (transformers) happen inside the handlers, so ``hardmix --help`` stays fast.
"""

from __future__ import annotations

import argparse

from hardmix.cli import EncodeCommand, lazy_command

#: The transfer protocol ``--protocol`` accepts: official SentEval's, the only one, which the JSON records
#: (:data:`hardmix.text.evaluation.PROTOCOL`, not imported here: that module loads torch).
PROTOCOL = "senteval"


def _check(args: argparse.Namespace) -> None:
    from hardmix.config.loader import check_options

    check_options(args, positive=("batch_size", "max_length"))


def _check_eval(args: argparse.Namespace) -> None:
    """:func:`_check`, and ``--protocol`` is SentEval's: anything else (hardmix's former ``converged``) is
    refused in one line, before any model or data is loaded.

    Example:
        >>> _check_eval(argparse.Namespace(batch_size=128, max_length=None, protocol="converged"))
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.ConfigError: --protocol converged: the only transfer protocol is senteval ...
    """
    from hardmix.utils.errors import ConfigError

    _check(args)
    if args.protocol != PROTOCOL:
        raise ConfigError(f"--protocol {args.protocol}: the only transfer protocol is {PROTOCOL} "
                          "(SentEval's)")


def register(top, evaluate, export, encode: EncodeCommand | None = None) -> None:  # noqa: ANN001 (argparse)
    p = evaluate.add_parser("text", help="SentEval-protocol STS and transfer evaluation")
    p.add_argument("model", help="a hardmix export, a Hugging Face folder or a sentence-transformers folder")
    p.add_argument("--tasks", default="sts,transfer", help="comma list of task groups: sts, transfer")
    p.add_argument("--pooling", default=None,
                   help="cls, cls_before_pooler, avg, avg_first_last (default: the model's own or cls)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--aggregation", default="all", choices=["all", "mean", "wmean"],
                   help="STS12-16 aggregation (SimCSE's 'all' by default)")
    p.add_argument("--protocol", default=PROTOCOL, metavar=PROTOCOL,
                   help="transfer protocol: senteval, the only one (official SentEval's classifier and "
                        "protocol, comparable with the papers' tables; the JSON records it)")
    p.add_argument("--json", dest="json_out", default=None, help="write the scores to this JSON file")
    p.set_defaults(func=lazy_command("hardmix.text.evaluation:cli_main", _check_eval))

    if encode is not None:
        g = encode.add_input(
            "sentences", lazy_command("hardmix.text.encoding:cli_main", _check),
            help="one sentence a line on standard input (row i is line i), MODEL a hardmix export or a "
                 "Hugging Face folder; the array goes to standard output, or to --output with "
                 "OUT.sentences.txt beside it (the sentences in row order, for hardmix neighbours)")
        g.add_argument("--pooling", default=None,
                       help="cls, cls_before_pooler, avg, avg_first_last (default: the model's own or cls)")
        g.add_argument("--max-length", type=int, default=None, help="truncation in tokens")
