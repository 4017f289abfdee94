"""The ``hardmix`` command line.

``hardmix train TASK CONFIG`` trains any registered task (the ``hardmix.tasks`` entry points, e.g.
``text``, ``vision``) through the engine; ``strategies`` lists the core's strategies; ``config schema``
prints a config's JSON Schema and ``config show`` a config resolved (:mod:`hardmix.commands.config`). A
package adds its own subcommands (``eval text``, ``eval knn``, ``export vision``, ...) through the
``hardmix.cli`` entry points: a function ``register(top, evaluate, export)`` that receives the top-level,
the ``eval`` and the ``export`` subparsers. ``compare``, ``data`` and ``neighbours`` are the core's own. The
core imports no task by name, and heavy dependencies load only when their command runs.

``encode`` is one command for every modality (:class:`EncodeCommand`): the core owns its parser (MODEL,
``--output``, ``--batch-size``) and a ``register`` that accepts a fourth argument, ``encode``, adds its
modality's input to it: text reads sentences from standard input, vision ``--images FOLDER``; each input
brings its own options, in its own group of ``hardmix encode --help``. The command runs the input that was
given (standard input's when no input option is), and refuses another input's options. Why the core owns
it: two modalities cannot both create an ``encode`` subparser, the options they share must be spelled
once, and the core cannot import a task to dispatch to it; a ``register(top, evaluate, export)`` of three
arguments keeps working, with no encode input.
"""

from __future__ import annotations

import argparse
import errno
import inspect
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import NamedTuple

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
    ensure_data(task.about(cfg).data_needs(), download_allowed=not args.no_download
                and int(os.environ.get("WORLD_SIZE", "1")) == 1)
    results = run_training(task, cfg, args.output, resume=bool(args.resume), start_cache=args.start_cache)
    if int(os.environ.get("RANK", "0")) == 0:  # the process group is gone by now: torchrun's variable
        from hardmix.training.learned import start_end_lines

        print("\n".join([task.about(cfg).report(results), *start_end_lines(results)]))
    return exit_status(results["interrupted"]) if results.get("interrupted") else 0


#: The tasks' entry-point group (:data:`hardmix.training.registry.GROUP`; read here without importing the
#: engine, so that ``hardmix --help`` and argument errors load no torch).
TASKS_GROUP = "hardmix.tasks"


def _task_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=TASKS_GROUP))


class _EncodeInput(NamedTuple):
    what: str  # sentences, images
    dest: str | None  # the option's attribute; None: standard input
    option: str | None  # --images
    group: argparse._ArgumentGroup
    handler: Callable[[argparse.Namespace], int]

    @property
    def source(self) -> str:
        return self.option or "standard input"


class EncodeCommand:
    """``hardmix encode MODEL [INPUT] [--output OUT]``: one subcommand, an input per modality.

    The parser is created when the first input is added (no modality, no ``encode``) with what every input
    shares: ``MODEL``, ``--output/-o`` and ``--batch-size``. :meth:`add_input` adds a modality's input and
    returns the argument group its own options go into. When the command runs, the input whose option was
    given runs (standard input's when none was); two inputs, or an option of another input, are refused in
    one line.

    Example:
        >>> top = argparse.ArgumentParser(prog="hardmix")
        >>> encode = EncodeCommand(top.add_subparsers(dest="command"))
        >>> lines = encode.add_input("lines", lambda a: print("lines for", a.model))
        >>> _ = lines.add_argument("--upper", action="store_true")
        >>> _ = encode.add_input("dots", lambda a: print("dots of", a.dots), option="--dots", metavar="FILE")
        >>> for argv in (["encode", "m"], ["encode", "m", "--dots", "d.txt"]):
        ...     args = top.parse_args(argv)
        ...     _ = args.func(args)
        lines for m
        dots of d.txt
        >>> args = top.parse_args(["encode", "m", "--dots", "d.txt", "--upper"])
        >>> args.func(args)
        Traceback (most recent call last):
        ...
        hardmix.utils.errors.ConfigError: --upper: an option of the lines input (standard input), not of ...
    """

    def __init__(self, subparsers: argparse._SubParsersAction) -> None:
        self._subparsers = subparsers
        self._parser: argparse.ArgumentParser | None = None
        self._inputs: list[_EncodeInput] = []

    @property
    def parser(self) -> argparse.ArgumentParser:
        """The ``encode`` subparser (created on first use)."""
        if self._parser is None:
            p = self._subparsers.add_parser(
                "encode", help="encode inputs (sentences on stdin, images, ...) to an (N, D) .npy array",
                description="Encode inputs to an (N, D) float32 .npy array, one row per input, with a "
                            "trained encoder. Each input below reads its own kind of MODEL.")
            p.add_argument("model", metavar="MODEL", help="the encoder (what each input below accepts)")
            p.add_argument("--output", "-o", default=None, metavar="OUT",
                           help="the .npy file to write (with the listing of its rows beside it, "
                                "OUT.<kind>.txt, for hardmix neighbours)")
            p.add_argument("--batch-size", type=int, default=128, metavar="N",
                           help="inputs per forward pass (default 128)")
            p.set_defaults(func=self.run)
            self._parser = p
        return self._parser

    def add_input(self, what: str, handler: Callable[[argparse.Namespace], int], option: str | None = None,
                  metavar: str | None = None, help: str | None = None) -> argparse._ArgumentGroup:
        """Add a modality's input.

        Args:
            what: what it encodes (``sentences``, ``images``), for help and errors.
            handler: runs the command (normally a :func:`lazy_command`).
            option: the option naming the input (``--images``); None: the input is standard input (one
                modality at most).
            metavar, help: of that option; ``help`` also describes the group.

        Returns:
            The argument group of the input, for its own options.

        Raises:
            ValueError: a second standard-input input.
        """
        if option is None and any(i.dest is None for i in self._inputs):
            raise ValueError(f"encode: the {what} input reads standard input, which another input reads")
        group = self.parser.add_argument_group(f"{what} ({option or 'standard input'})",
                                               None if option else help)
        dest = None
        if option is not None:
            dest = group.add_argument(option, metavar=metavar, default=None, help=help).dest
        self._inputs.append(_EncodeInput(what, dest, option, group, handler))
        return group

    def run(self, args: argparse.Namespace) -> int:
        """Run the input given (standard input's when no input option is).

        Raises:
            ConfigError: two inputs, no input, or an option of another input.
        """
        from hardmix.utils.errors import ConfigError

        given = [i for i in self._inputs if i.dest is not None and getattr(args, i.dest, None) is not None]
        if len(given) > 1:
            raise ConfigError(f"encode: {given[0].option} and {given[1].option} are two inputs; give one")
        chosen = given[0] if given else next((i for i in self._inputs if i.dest is None), None)
        if chosen is None:
            raise ConfigError(f"encode: name the input ({' or '.join(i.source for i in self._inputs)})")
        for other in self._inputs:
            if other is chosen:
                continue
            for action in other.group._group_actions:  # the options this input added to its group
                if action.dest != other.dest and getattr(args, action.dest, action.default) != action.default:
                    raise ConfigError(f"{action.option_strings[0]}: an option of the {other.what} input "
                                      f"({other.source}), not of {chosen.source}")
        return int(chosen.handler(args) or 0)


def _register_commands(register: Callable[..., None], sub: argparse._SubParsersAction,
                       evaluate: argparse._SubParsersAction, export: argparse._SubParsersAction,
                       encode: EncodeCommand) -> None:
    """Call an entry point's ``register``: with ``encode=`` when it takes it (a parameter of that name, or
    ``**kwargs``), else as ``register(top, evaluate, export)``, the form plug-ins have always had.

    Example:
        >>> sub = argparse.ArgumentParser().add_subparsers()
        >>> def old(top, evaluate, export):
        ...     print("three arguments")
        >>> def new(top, evaluate, export, encode=None):
        ...     print("encode:", type(encode).__name__)
        >>> for register in (old, new):
        ...     _register_commands(register, sub, sub, sub, EncodeCommand(sub))
        three arguments
        encode: EncodeCommand
    """
    try:
        params = list(inspect.signature(register).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): the three arguments
        params = []
    takes = any(p.name == "encode" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    register(top=sub, evaluate=evaluate, export=export, **({"encode": encode} if takes else {}))


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
    _add_set_option(p)
    p.add_argument("--output", default=None, help="run folder (default: the config's output)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its checkpoint")
    p.add_argument("--no-download", action="store_true",
                   help="never fetch missing data (also HARDMIX_OFFLINE=1); list what is missing instead")
    p.add_argument("--start-cache", metavar="DIR", default=None,
                   help="a folder shared with other runs: the starting encoder is scored once among the runs "
                        "that start from the same one (hardmix compare gives its cells one)")
    p.set_defaults(func=_cmd_train)

    _add_config_command(sub, [*tasks, "compare"])

    from hardmix.compare.cli import register as register_compare
    from hardmix.datasets.cli import register as register_data

    register_compare(sub, lazy_command("hardmix.compare.command:main"))
    register_data(sub)

    evaluate = sub.add_parser("eval", help="evaluate an encoder")
    eval_sub = evaluate.add_subparsers(dest="eval_task", metavar="WHAT", required=True)
    export = sub.add_parser("export", help="export a trained encoder for other libraries")
    export_sub = export.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    encode = EncodeCommand(sub)
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        _register_commands(ep.load(), sub, eval_sub, export_sub, encode)

    p = sub.add_parser("neighbours", help="the nearest rows of an encoded .npy array to some of its items")
    p.add_argument("embeddings", metavar="EMBEDDINGS",
                   help="an (N, D) .npy array of hardmix encode -o, its rows listed beside it (EMB.paths.txt "
                        "or EMB.sentences.txt)")
    p.add_argument("queries", metavar="QUERY", nargs="+",
                   help="an item exactly as listed (a path, a sentence; after -- when it starts with -) or "
                        "#ROW, a row number from 0")
    p.add_argument("-k", "--k", type=int, default=10, help="neighbours per query (default 10)")
    p.add_argument("--backend", choices=["auto", "faiss", "numpy"], default="auto",
                   help="auto: faiss when installed (HARDMIX_NO_FAISS=1 ignores it), else numpy; both exact")
    p.set_defaults(func=lazy_command("hardmix.commands.neighbours:cli_main", _check_neighbours))
    return parser


def _add_set_option(p: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable), as ``train`` and ``config show`` take it."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.max_steps=100 (repeatable)")


def _add_config_command(sub: argparse._SubParsersAction, kinds: list[str]) -> None:
    """``hardmix config schema KIND`` and ``hardmix config show CONFIG`` (:mod:`hardmix.commands.config`)."""
    config = sub.add_parser("config", help="a config's JSON Schema (for editors), or a config resolved with "
                                           "each value's origin")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    p = config_sub.add_parser("schema", help=f"print the JSON Schema of a config ({', '.join(kinds)})")
    p.add_argument("kind", metavar="KIND", choices=kinds,
                   help=f"one of: {', '.join(kinds)} (compare: a comparison spec)")
    p.set_defaults(func=lazy_command("hardmix.commands.config:cmd_schema"))
    p = config_sub.add_parser("show", help="print a config as hardmix reads it, each value with its origin "
                                           "(default, file, --set)")
    p.add_argument("config", help="a task's config or a comparison spec (YAML)")
    p.add_argument("--task", choices=kinds, default=None,
                   help="what the config is (default: read from its keys)")
    _add_set_option(p)
    p.set_defaults(func=lazy_command("hardmix.commands.config:cmd_show"))


def _check_neighbours(args: argparse.Namespace) -> None:
    from hardmix.config.loader import check_options

    check_options(args, positive=("k",))


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
INPUT_OPTIONS = ("config", "checkpoint", "model", "run", "spec", "dataset", "corpus", "images")
#: Commands whose ``--output`` is a folder they manage themselves (a run, a comparison).
FOLDER_OUTPUT_COMMANDS = ("train", "compare", "data")


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: every file the command will write can be written, and none is one of its inputs or
    a run's own file (its checkpoint, results, config or metrics). Raises OSError / ConfigError naming the
    option and the path."""
    import os
    from pathlib import Path

    from hardmix.utils.errors import ConfigError

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
        # a run folder's own files, never a command's output; imported here, where a file is checked:
        # hardmix.training loads torch, which --help and argument errors never need
        from hardmix.training.run_folder import CHECKPOINT, CONFIG, METRICS, RESULTS

        run_own_files = (CHECKPOINT, RESULTS, CONFIG, METRICS)
        path = Path(value).expanduser()
        real = os.path.realpath(path)
        # never written over: the input itself, a run's own file in an input folder, or a file of a model
        # folder (one holding config.json: its weights, vocabulary, tokenizer) in one
        model_file = os.path.lexists(path) and os.path.isfile(os.path.join(os.path.dirname(real),
                                                                            "config.json"))
        for src, name in inputs.items():
            inside = os.path.isdir(src) and real.startswith(src.rstrip(os.sep) + os.sep)
            if real == src or (inside and (path.name in run_own_files or model_file)):
                raise ConfigError(f"{option}: {path} is this command's own input ({name.upper()} {src}); "
                                  f"write elsewhere")
            # a new file in a data or model folder read changes it (a model's fingerprint, the images); a run
            # folder (holding its checkpoint) may take one beside its own files (RUN/knn.json), and a RUN
            # without one is the command's to refuse, for what it is (no checkpoint), not for this
            if inside and not os.path.isfile(os.path.join(src, CHECKPOINT)) and name != "run":
                raise ConfigError(f"{option}: {real} is inside {src}, a folder this command reads "
                                  f"({name.upper()}): writing there changes what it reads (a model folder's "
                                  "fingerprint, an image folder's images); write elsewhere")
        if path.name in run_own_files and \
                (path.parent / CHECKPOINT).is_file():
            raise ConfigError(f"{option}: {path} is a file of the run in {path.parent}; write elsewhere")
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def check_output_beside(args: argparse.Namespace, path: str | os.PathLike[str]) -> None:
    """:func:`check_outputs` for a file a command writes beside its ``--output`` (``encode``'s listing of
    its rows): writable, and not one of the command's inputs nor a run's or a model's own file."""
    beside = {**vars(args), "output": os.fspath(path), "json_out": None, "out": None}
    check_outputs(argparse.Namespace(**beside))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from hardmix.utils.errors import ConfigError, RunError, RunInterrupted
    from hardmix.utils.offline import libraries_offline

    try:
        # HARDMIX_OFFLINE=1 and --no-download reach every library before the command imports it (and the
        # processes it starts: a comparison's cells)
        with libraries_offline(no_download=bool(getattr(args, "no_download", False))):
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
