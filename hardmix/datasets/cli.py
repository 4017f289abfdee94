"""``hardmix data download|list|check``: fetch, list and verify the data sets of the registry."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hardmix.datasets.sources import BASE_URL_ENV, DATASETS


def _fmt_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _root_folder(root: str | None) -> Path:
    """The data root of ``--root`` (default: the data root); a path that exists must be a folder."""
    from hardmix.datasets.paths import download_root
    from hardmix.utils.errors import ConfigError

    path = download_root(root)
    if path.exists() and not path.is_dir():
        where = "--root" if root is not None else "the data root"
        raise ConfigError(f"{where}: {path} is not a folder; name the data folder (or a new one)")
    return path


def _cmd_download(args: argparse.Namespace) -> int:
    from hardmix.datasets.manager import download

    _root_folder(args.root)
    for o in download(args.names, root=args.root, base_url=args.base_url, progress=not args.quiet,
                      keep_archives=args.keep_archives):
        print(f"{o.name}: {'present, checked' if o.action == 'present' else 'downloaded'}: {o.path}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from hardmix.datasets.manager import inventory

    print(f"data root: {_root_folder(args.root)}")
    for e in inventory(args.root):
        state = (("present (downloaded by hardmix)" if e.recorded else "present") if e.present else "absent")
        if e.stand_in is not None and not e.present:
            state = f"absent ({e.stand_in} stands in)"
        size = _fmt_size(e.size) if e.present else "-"
        print(f"  {e.name:<19} {state:<32} {size:>9}  {e.path}\n  {'':<19} {e.description}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from hardmix.datasets.manager import check, read_manifest

    root = _root_folder(args.root)
    results = check(args.names, root=root)
    if not results:
        print(f"no data set is present under {root} (`hardmix data download NAME`)")
        return 0
    failed = 0
    for name, problems in results.items():
        if problems:
            failed += 1
            print(f"{name}: FAILED: " + "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else ""))
        else:
            how = "layout and recorded checksums" if read_manifest(root, name) else "layout (no checksums " \
                "recorded: not downloaded by hardmix)"
            print(f"{name}: ok ({how})")
    return 1 if failed else 0


def register(subparsers: Any) -> None:
    """Add ``data`` (``download``, ``list``, ``check``) to the top-level subcommands."""
    data = subparsers.add_parser("data", help="download, list and check data sets")
    sub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    root_help = "data root (default: HARDMIX_DATA, else ~/.cache/hardmix/data)"

    p = sub.add_parser("download", help="fetch data sets into the data root")
    p.add_argument("names", nargs="+", metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    p.add_argument("--root", help=root_help)
    p.add_argument("--base-url", help=f"a mirror holding every source under its key (or {BASE_URL_ENV})")
    p.add_argument("--keep-archives", action="store_true", help="keep the downloaded archives")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_download)

    p = sub.add_parser("list", help="the data sets, whether present, and their sizes")
    p.add_argument("--root", help=root_help)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("check", help="check the layout and recorded checksums of present data sets")
    p.add_argument("names", nargs="*", metavar="NAME", help="data sets to check (default: all present)")
    p.add_argument("--root", help=root_help)
    p.set_defaults(func=_cmd_check)

