"""The ``hardmix`` command line.

``hardmix train TASK CONFIG`` trains any registered task (the ``hardmix.tasks`` entry points, e.g.
``text``, ``vision``) through the engine; ``strategies`` lists the core's strategies. A package adds its
own subcommands (``eval text``, ``encode``, ``eval knn``, ``export vision``, ...) through the ``hardmix.cli``
entry points: a function ``register(top, evaluate, export)`` that receives the top-level, the ``eval`` and the
``export`` subparsers. ``compare`` and ``data`` are the core's own. The core
imports no task by name, and heavy dependencies load only when their command runs.
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from hardmix.version import __version__

#: Entry points that add subcommands: ``name = "module:register"``.
COMMANDS_GROUP = "hardmix.cli"


def lazy_command(
    target: str, check: Callable[[argparse.Namespace], None] | None = None
) -> Callable[[argparse.Namespace], int]:
    """A subcommand handler that imports ``"module:function"`` only when its command runs (so ``hardmix
    --help`` loads no heavy library), after ``check(args)`` has validated the options."""

    def handler(args: argparse.Namespace) -> int:
        import importlib

        if check is not None:
            check(args)
        module, _, function = target.partition(":")
        return int(getattr(importlib.import_module(module), function)(args) or 0)

    return handler


def _cmd_strategies(args: argparse.Namespace) -> int:
    from hardmix.strategies import describe_strategies

    print(describe_strategies())
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    import os

    from hardmix.datasets.needs import ensure_data
    from hardmix.training.api import load_config_for, resolve_task
    from hardmix.training.engine import run_training
    from hardmix.training.signals import exit_status

    task = resolve_task(args.task)
    cfg = load_config_for(task, args.config, list(args.overrides or []))
    # missing data is fetched first (one process only: several processes list it instead)
    ensure_data(task.data_needs(cfg), download_allowed=not args.no_download
                and int(os.environ.get("WORLD_SIZE", "1")) == 1)
    results = run_training(task, cfg, args.output, resume=bool(args.resume))
    if int(os.environ.get("RANK", "0")) == 0:  # the process group is gone by now: torchrun's variable
        print(task.report(results))
    return exit_status(results["interrupted"]) if results.get("interrupted") else 0


#: The tasks' entry-point group (:data:`hardmix.training.registry.GROUP`; read here without importing the
#: engine, so that ``hardmix --help`` and argument errors load no torch).
TASKS_GROUP = "hardmix.tasks"


def _task_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=TASKS_GROUP))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hardmix",
        description="Contrastive representation learning with feature-space hard-negative mixing.",
    )
    parser.add_argument("--version", action="version", version=f"hardmix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("strategies", help="list the registered mixing strategies and their parameters")
    p.set_defaults(func=_cmd_strategies)

    tasks = _task_names()
    p = sub.add_parser("train", help=f"train an encoder ({', '.join(tasks)})")
    p.add_argument("task", metavar="TASK", choices=tasks, help=f"one of: {', '.join(tasks)}")
    p.add_argument("config", help="YAML config (see configs/<task>/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.max_steps=100 (repeatable)")
    p.add_argument("--output", default=None, help="run folder (default: the config's output)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its checkpoint")
    p.add_argument("--no-download", action="store_true",
                   help="never fetch missing data (also HARDMIX_OFFLINE=1); list what is missing instead")
    p.set_defaults(func=_cmd_train)

    from hardmix.compare.cli import register as register_compare
    from hardmix.datasets.cli import register as register_data

    register_compare(sub)
    register_data(sub)

    evaluate = sub.add_parser("eval", help="evaluate an encoder")
    eval_sub = evaluate.add_subparsers(dest="eval_task", metavar="WHAT", required=True)
    export = sub.add_parser("export", help="export a trained encoder for other libraries")
    export_sub = export.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        ep.load()(top=sub, evaluate=eval_sub, export=export_sub)
    return parser


#: What to do about an operating-system error, by errno.
_OS_ADVICE = {
    errno.ENOSPC: "the disk is full: free space there or write elsewhere",
    errno.EDQUOT: "the disk quota is exceeded: free space there or write elsewhere",
    errno.EACCES: "check its permissions, or use another path",
    errno.EPERM: "check its permissions, or use another path",
    errno.EROFS: "the file system is read-only: use another path",
    errno.EISDIR: "it is a folder: name a file",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ENOENT: "check the path",
    errno.EEXIST: "a file is in the way: remove it or choose another path",
}


def error_line(e: BaseException) -> str:
    """The one line ``hardmix: error: ...`` says for ``e``: an operating-system error names the file and
    what to do; any message is kept on one line.

    Example:
        >>> error_line(OSError(errno.ENOSPC, "No space left on device", "runs/a/checkpoint.pt"))
        'runs/a/checkpoint.pt: No space left on device; the disk is full: free space there or write elsewhere'
    """
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        advice = _OS_ADVICE.get(e.errno or 0)
        text = f"{e.filename}: {e.strerror}" + (f"; {advice}" if advice else "")
    else:
        text = str(e) or type(e).__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


#: Options naming a file a command writes (attribute -> option), and those naming what it reads.
OUTPUT_OPTIONS = {"json_out": "--json", "output": "--output", "out": "OUT"}
INPUT_OPTIONS = ("config", "checkpoint", "model", "run", "spec", "dataset", "corpus")
#: Commands whose ``--output`` is a folder they manage themselves (a run, a comparison).
FOLDER_OUTPUT_COMMANDS = ("train", "compare", "data")
#: A run folder's own files (hardmix.training.run_folder), never a command's output.
RUN_OWN_FILES = ("checkpoint.pt", "results.json", "config.yaml", "metrics.jsonl")


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every file the command will write can be written, and none is one of its inputs or
    a run's own file (its checkpoint, results, config or metrics). Raises OSError / ConfigError naming the
    option and the path."""
    import os
    from pathlib import Path

    from hardmix.errors import ConfigError

    inputs = {}
    for name in INPUT_OPTIONS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value and os.path.exists(value):
            inputs[os.path.realpath(value)] = name
    for attr, option in OUTPUT_OPTIONS.items():
        value = getattr(args, attr, None)
        if not isinstance(value, str) or not value or value == "-" or \
                (attr == "output" and args.command in FOLDER_OUTPUT_COMMANDS):
            continue
        path = Path(value).expanduser()
        real = os.path.realpath(path)
        # never written over: the input itself, a run's own file in an input folder, or a file of a model
        # folder (one holding config.json: its weights, vocabulary, tokenizer) in one
        model_file = os.path.lexists(path) and os.path.isfile(os.path.join(os.path.dirname(real),
                                                                            "config.json"))
        for src, name in inputs.items():
            inside = os.path.isdir(src) and real.startswith(src.rstrip(os.sep) + os.sep)
            if real == src or (inside and (path.name in RUN_OWN_FILES or model_file)):
                raise ConfigError(f"{option}: {path} is this command's own input ({name.upper()} {src}); "
                                  f"write elsewhere")
        if path.name in RUN_OWN_FILES and \
                (path.parent / "checkpoint.pt").is_file():
            raise ConfigError(f"{option}: {path} is a file of the run in {path.parent}; write elsewhere")
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from hardmix.errors import ConfigError, RunError, RunInterrupted

    try:
        check_outputs(args)
        return int(args.func(args) or 0)
    except RunInterrupted as e:  # stopped at once by a signal: 128 + its number, as the shell reports it
        from hardmix.training.signals import exit_status

        print(f"hardmix: error: {error_line(e)}", file=sys.stderr)
        return exit_status(e.signal)
    except (ConfigError, OSError, ValueError, RunError) as e:  # OSError: permissions, a full disk, ...
        print(f"hardmix: error: {error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before any work was written
        print("hardmix: error: interrupted by SIGINT before any work was saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
