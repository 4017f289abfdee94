"""Registers the text subcommands: ``train text``, ``eval text`` and ``encode``.

Heavy imports (transformers) happen inside the handlers, so ``hardmix --help`` stays fast.
"""

from __future__ import annotations

import argparse


def _train(args: argparse.Namespace) -> int:
    from hardmix.text.trainer import cli_main

    return cli_main(args)


def _eval(args: argparse.Namespace) -> int:
    from hardmix.text.evaluation import cli_main

    return cli_main(args)


def _encode(args: argparse.Namespace) -> int:
    from hardmix.text.encoding import cli_main

    return cli_main(args)


def register(top, train, evaluate) -> None:  # noqa: ANN001 (argparse subparser actions)
    p = train.add_parser("text", help="train a sentence encoder (SimCSE, MixCSE, ...)")
    p.add_argument("config", help="YAML config (see configs/text/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.max_steps=100 (repeatable)")
    p.add_argument("--output", default=None, help="run directory (default: the config's output)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its last state")
    p.set_defaults(func=_train)

    p = evaluate.add_parser("text", help="SentEval-protocol STS and transfer evaluation")
    p.add_argument("model", help="a hardmix export, a Hugging Face folder or a sentence-transformers folder")
    p.add_argument("--tasks", default="sts,transfer", help="comma list of task groups: sts, transfer")
    p.add_argument("--pooling", default=None,
                   help="cls, cls_before_pooler, avg, avg_first_last (default: the model's own or cls)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--aggregation", default="all", choices=["all", "mean", "wmean"],
                   help="STS12-16 aggregation (SimCSE's 'all' by default)")
    p.add_argument("--protocol", default="senteval", choices=["senteval", "converged"],
                   help="transfer protocol: senteval (official SentEval's classifier and protocol, comparable"
                        " with the papers' tables; default) or converged (hardmix's own: each classifier at "
                        "its regularised optimum, deterministic, not comparable with published numbers)")
    p.add_argument("--json", dest="json_out", default=None, help="write the scores to this JSON file")
    p.set_defaults(func=_eval)

    p = top.add_parser("encode", help="encode sentences (stdin, one a line) to a .npy array (stdout)")
    p.add_argument("model", help="a hardmix export or a Hugging Face folder")
    p.add_argument("--pooling", default=None)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    p.set_defaults(func=_encode)
