"""Nearest neighbours in an array of embeddings: ``hardmix neighbours EMBEDDINGS QUERY... [-k 10]``.

EMBEDDINGS is an (N, D) ``.npy`` array written by ``hardmix encode ... -o EMB.npy``, whose rows are listed
beside it, one item a line, in row order (:func:`listing_path`):

- ``EMB.paths.txt``: images (``hardmix encode RUN --images FOLDER -o EMB.npy``), the file of each row;
- ``EMB.sentences.txt``: sentences (``hardmix encode MODEL -o EMB.npy < sentences.txt``), row i line i.

A QUERY is an item of that listing, exactly as listed (a path, a sentence; a sentence starting with ``-``
goes after ``--``), or ``#ROW``, a row number from 0 (an item spelled ``#3`` is that item first). A
sentence listed several times stands for its first row. For each query the command prints its k nearest
*other* rows by cosine similarity, as rank, similarity (4 decimals) and item, separated by tabs::

    query #0: photos/cat.jpg
    1    0.9731    photos/2023/cat2.jpg
    2    0.9528    photos/dog.jpg

The search is exact either way: faiss's ``IndexFlatIP`` over the unit rows when faiss is installed
(:mod:`hardmix.utils.faiss_backend`; ``HARDMIX_NO_FAISS=1`` ignores it), else NumPy's matrix product;
``--backend faiss|numpy`` picks one. The two agree up to ties and float rounding.

The core reads arrays only: it imports neither a task nor torch.

Example:
    >>> emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0]], dtype=np.float32)
    >>> sims, rows = nearest_rows(emb, [0], k=2, backend="numpy")
    >>> rows.tolist(), [round(float(s), 4) for s in sims[0]]
    ([[1, 2]], [0.9939, 0.0])
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The listings of an embeddings file's rows, by what its rows are: ``EMB.<kind>.txt``.
LISTING_KINDS = ("paths", "sentences")
BACKENDS = ("auto", "faiss", "numpy")


def listing_path(embeddings: str | os.PathLike[str], kind: str) -> Path:
    """The listing of the rows of ``embeddings`` (``kind``: ``paths`` or ``sentences``): its name without
    ``.npy``, then ``.<kind>.txt``, in the same folder.

    >>> listing_path("out/emb.npy", "paths").as_posix(), listing_path("emb", "sentences").as_posix()
    ('out/emb.paths.txt', 'emb.sentences.txt')
    """
    if kind not in LISTING_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(LISTING_KINDS)}, got {kind!r}")
    path = Path(embeddings)
    return path.with_name(f"{path.name.removesuffix('.npy')}.{kind}.txt")


def beside(embeddings: str | os.PathLike[str], suffix: str) -> Path:
    """A file of the set ``hardmix encode -o`` writes, beside ``embeddings``: its name without ``.npy``,
    then ``suffix``.

    >>> beside("out/emb.npy", ".incomplete").as_posix(), skipped_path("emb.npy").as_posix()
    ('out/emb.incomplete', 'emb.skipped.txt')
    """
    path = Path(embeddings)
    return path.with_name(f"{path.name.removesuffix('.npy')}{suffix}")


def marker_path(embeddings: str | os.PathLike[str]) -> Path:
    """``EMB.incomplete``: present only while ``hardmix encode -o EMB.npy`` replaces the array and its
    listings (:func:`hardmix.utils.confine.replace_together`), or after that was killed; a reader refuses
    the set then (the array and its listing may be of two runs)."""
    return beside(embeddings, ".incomplete")


def skipped_path(embeddings: str | os.PathLike[str]) -> Path:
    """``EMB.skipped.txt``: the images ``hardmix encode --images`` left out (undecodable), one a line."""
    return beside(embeddings, ".skipped.txt")


def set_paths(embeddings: str | os.PathLike[str]) -> list[Path]:
    """Every file of the set ``hardmix encode -o EMB.npy`` writes besides the array (both listings and the
    skipped images): a new set replaces them all, removing those it does not have."""
    return [listing_path(embeddings, kind) for kind in LISTING_KINDS] + [skipped_path(embeddings)]


def visible(item: str) -> str:
    r"""An item as a message shows it: Python's quoting, so that a ``\r`` or a tab is seen.

    >>> print(visible("a.jpg\r"))
    'a.jpg\r'
    """
    return repr(item)


def format_listing(items: Sequence[str]) -> str:
    r"""The text of a listing: one item a line, each ended by ``\n`` (an item may not hold one, nor end with
    ``\r``, which a reader would take for a CRLF line end).

    >>> format_listing(["a", "b c"])
    'a\nb c\n'
    """
    for row, item in enumerate(items):
        if "\n" in item:
            raise ValueError(f"row {row} ({item!r}) holds a line break; a listing holds one item a line")
        if item.endswith("\r"):
            raise ValueError(f"row {row} ({item!r}) ends with a carriage return (\\r); a listing's lines end "
                             "with \\n only")
    return "".join(f"{item}\n" for item in items)


def parse_listing(text: str) -> list[str]:
    r"""The items of a listing's text: lines ended by ``\n`` only (a ``\r`` is part of its item).

    >>> parse_listing("a\rb\n\nc\n"), parse_listing("")
    (['a\rb', '', 'c'], [])
    """
    if not text:
        return []
    return text.removesuffix("\n").split("\n")


def write_set(output: str | os.PathLike[str], embeddings: np.ndarray, kind: str, items: Sequence[str],
              skipped: Sequence[str] | None = None) -> tuple[Path, str]:
    """Write what ``hardmix encode -o OUTPUT`` writes, as one set: the (N, D) array, its listing
    (``kind``: ``paths`` or ``sentences``) and, with ``skipped`` (images), ``EMB.skipped.txt``; any other
    member of a previous set (the other kind's listing, a skipped file) is removed. They are replaced
    together or not at all (:func:`hardmix.utils.confine.replace_together`, :func:`marker_path`): a full
    disk keeps the previous set whole and names the file. The temporary files a killed ``encode`` of the
    same OUTPUT left are removed first.

    Returns:
        (the listing's path, a note of the stale temporary files removed, empty when none).

    Raises:
        ValueError: a row that is not finite, or rows and items that differ in number.
        OSError: a full disk or a quota, naming the file.
    """
    from hardmix.training.run_folder import process_alive  # encode's: its modality has loaded torch
    from hardmix.utils.confine import remove_stale_temporaries, replace_together, save_numpy_to, say_removed

    check_finite_rows(embeddings, f"encode: the {kind.rstrip('s')} embeddings")
    if embeddings.shape[0] != len(items):
        raise ValueError(f"encode: {embeddings.shape[0]} rows for {len(items)} {kind}")
    out = Path(output)
    folder = out.parent  # the folder the output names: the set stays in it
    listing = listing_path(out, kind)
    members: list[tuple[Path, bytes]] = [(listing, format_listing(items).encode("utf-8"))]
    if skipped is not None:
        members.append((skipped_path(out), format_listing(skipped).encode("utf-8")))
    names = [p.name for p in (out, marker_path(out), *set_paths(out))]
    note = say_removed(remove_stale_temporaries(folder, folder, process_alive, names=names, held=True),
                       str(folder))
    array = np.ascontiguousarray(embeddings)
    files: list[tuple[Path, Any, str]] = [(out, lambda f: save_numpy_to(array, f), "wb")]
    files += [(path, (lambda f, data=data: f.write(data)), "wb") for path, data in members]
    replace_together(files, marker_path(out), folder,
                     remove=[p for p in set_paths(out) if p not in {m for m, _ in members}])
    return listing, note


def read_embeddings(path: str | os.PathLike[str]) -> np.ndarray:
    """An (N, D) float32 array from a ``.npy`` file.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not named ``.npy``, is not a NumPy array, or is not a 2-D numeric array; one line
            naming the file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"EMBEDDINGS: {p} does not exist" if not p.exists() else
                                f"EMBEDDINGS: {p} is not a file")
    if p.suffix != ".npy":
        raise ValueError(f"EMBEDDINGS: {p} is not a .npy file (hardmix encode ... -o EMB.npy writes one)")
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise ValueError(f"EMBEDDINGS: {p} is not a NumPy .npy array ({reason})") from None
    if arr.ndim != 2 or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"EMBEDDINGS: {p} holds a {arr.dtype} array of shape {tuple(arr.shape)}, not (N, D) "
                         "embeddings")
    if arr.shape[1] == 0:
        raise ValueError(f"EMBEDDINGS: {p} holds an array of shape {tuple(arr.shape)}: rows of 0 dimensions "
                         "have no similarity")
    out = np.asarray(arr, dtype=np.float32)
    check_finite_rows(out, f"EMBEDDINGS: {p}")
    return out


def nonfinite_rows(embeddings: np.ndarray) -> list[int]:
    """The rows of an (N, D) array holding a NaN or an infinity.

    >>> nonfinite_rows(np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, np.inf]]))
    [1, 2]
    """
    return np.flatnonzero(~np.isfinite(embeddings).all(axis=1)).tolist()


def check_finite_rows(embeddings: np.ndarray, source: str) -> None:
    """Refuse an (N, D) array with a row that is not finite, in one line naming ``source`` and the rows
    (a NaN row has no similarity; an infinite one is everyone's nearest).

    >>> check_finite_rows(np.array([[1.0], [np.nan]]), "emb.npy")
    Traceback (most recent call last):
    ...
    ValueError: emb.npy: 1 of its 2 rows are not finite (NaN or infinite): row 1
    """
    bad = nonfinite_rows(embeddings)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        raise ValueError(f"{source}: {len(bad)} of its {embeddings.shape[0]} rows are not finite (NaN or "
                         f"infinite): row{'s' if len(bad) > 1 else ''} {shown}")


def find_listing(embeddings: str | os.PathLike[str]) -> Path:
    """The listing beside ``embeddings`` (``EMB.paths.txt`` or ``EMB.sentences.txt``).

    Raises:
        FileNotFoundError: neither exists.
        ValueError: both exist (one is stale).
    """
    found = [listing_path(embeddings, kind) for kind in LISTING_KINDS]
    present = [p for p in found if p.is_file()]
    if not present:
        raise FileNotFoundError(f"EMBEDDINGS: no listing of the rows of {embeddings} beside it ({found[0]} "
                                f"or {found[1]}; hardmix encode -o writes one)")
    if len(present) > 1:
        raise ValueError(f"EMBEDDINGS: both {present[0]} and {present[1]} list the rows of {embeddings}; "
                         "remove the stale one")
    return present[0]


def read_listing(path: str | os.PathLike[str]) -> list[str]:
    r"""The items of a listing file (:func:`parse_listing`, no newline translation); a file that is not
    UTF-8, or whose lines end with ``
`` (an editor's CRLF: hardmix writes ``
`` only, and an item
    ending with ``
`` would match no query), is refused in one line showing the line."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            items = parse_listing(f.read())
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    crlf = [row for row, item in enumerate(items) if item.endswith("\r")]
    if crlf:
        raise ValueError(f"{path}: line {crlf[0] + 1} ({visible(items[crlf[0]])}) ends with \\r\\n (CRLF "
                         f"line ends, {len(crlf)} of {len(items)} lines); hardmix writes \\n only: encode "
                         "again with -o, or convert the file's line ends to \\n")
    return items


def query_rows(queries: Sequence[str], items: Sequence[str], listing: str | os.PathLike[str] = "the listing",
               ) -> list[int]:
    """The row of each query: the first row listing it exactly, else ``#ROW``'s row.

    Raises:
        ValueError: a query that is neither, naming it and ``listing``.

    >>> query_rows(["b", "#0", "#9"], ["a", "b", "#9"])
    [1, 0, 2]
    """
    first: dict[str, int] = {}
    for row, item in enumerate(items):
        first.setdefault(item, row)
    rows = []
    for q in queries:
        if q in first:
            rows.append(first[q])
        elif q.startswith("#") and q[1:].isdigit() and int(q[1:]) < len(items):
            rows.append(int(q[1:]))
        else:
            raise ValueError(f"QUERY {visible(q)}: not an item of {listing} (give a path or sentence exactly "
                             f"as listed, or #ROW for a row 0 to {len(items) - 1})")
    return rows


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero), float32."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def nearest_rows(embeddings: np.ndarray, rows: Sequence[int], k: int = 10, backend: str = "auto",
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows most cosine-similar to each query row, the query row itself left out.

    Args:
        embeddings: (N, D) array.
        rows: Q query rows.
        k: neighbours per query (at most N - 1 are given).
        backend: ``auto`` (faiss when :func:`~hardmix.utils.faiss_backend.faiss_module` finds it, else
            NumPy), ``faiss`` or ``numpy``; both search exactly.

    Returns:
        (similarities (Q, k'), rows (Q, k')), k' = min(k, N - 1), in decreasing similarity (NumPy: ties
        in row order).

    Raises:
        ValueError: k < 1, an unknown backend, ``faiss`` when it is not available, or a row that is not
            finite. A result faiss does not find (its index -1) is never taken for a row: the search is
            then NumPy's.
    """
    from hardmix.utils.faiss_backend import faiss_module

    if k < 1:
        raise ValueError(f"k: expected a positive number, got {k}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    faiss = faiss_module() if backend in ("auto", "faiss") else None
    if backend == "faiss" and faiss is None:
        raise ValueError("--backend faiss: faiss is not installed (pip install 'hardmix[faiss]') or "
                         "HARDMIX_NO_FAISS is set")
    arr = np.asarray(embeddings, dtype=np.float32)
    check_finite_rows(arr, "embeddings")
    unit = _unit(arr)
    query = np.asarray(rows, dtype=np.int64)
    n = unit.shape[0]
    kk = min(k, n - 1)
    if kk <= 0 or query.size == 0:
        return np.zeros((query.size, 0), np.float32), np.zeros((query.size, 0), np.int64)
    if faiss is not None:
        index = faiss.IndexFlatIP(unit.shape[1])
        index.add(np.ascontiguousarray(unit))
        sims, idx = index.search(np.ascontiguousarray(unit[query]), kk + 1)
        if (idx >= 0).all():
            keep = idx != query[:, None]
            keep[keep.all(axis=1), -1] = False  # the query row was not among them: drop the last instead
            return (sims[keep].reshape(-1, kk).astype(np.float32), idx[keep].reshape(-1, kk).astype(np.int64))
        # faiss found fewer than asked (-1: no result, never a row): the exact search below instead
    sims = unit[query] @ unit.T
    sims[np.arange(query.size), query] = -np.inf
    order = np.argsort(-sims, axis=1, kind="stable")[:, :kk]
    return np.take_along_axis(sims, order, axis=1), order.astype(np.int64)


def format_neighbours(row: int, items: Sequence[str], sims: np.ndarray, rows: np.ndarray) -> str:
    r"""The block printed for one query: ``query #ROW: ITEM``, then ``RANK<TAB>SIMILARITY<TAB>ITEM``.

    >>> format_neighbours(0, ["a", "b"], np.array([0.5]), np.array([1]))
    'query #0: a\n1\t0.5000\tb'
    """
    lines = [f"query #{row}: {items[row]}"]
    lines += [f"{rank}\t{sim:.4f}\t{items[other]}" for rank, (sim, other) in enumerate(zip(sims, rows), 1)]
    return "\n".join(lines)


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix neighbours EMBEDDINGS QUERY... [-k K] [--backend B]`` (parser: :mod:`hardmix.cli`)."""
    marker = marker_path(args.embeddings)
    if os.path.lexists(marker):
        raise ValueError(f"EMBEDDINGS: {marker} is there: the hardmix encode -o that replaced "
                         f"{args.embeddings} and its listing did not finish (killed?), so they may be of two "
                         "runs; encode again with -o")
    emb = read_embeddings(args.embeddings)
    if emb.shape[0] == 0:
        raise ValueError(f"EMBEDDINGS: {args.embeddings} holds no rows")
    listing = find_listing(args.embeddings)
    items = read_listing(listing)
    if len(items) != emb.shape[0]:
        raise ValueError(f"{listing}: lists {len(items)} items, {args.embeddings} holds {emb.shape[0]} rows; "
                         "encode again with -o to write both together")
    rows = query_rows(args.queries, items, listing)
    sims, found = nearest_rows(emb, rows, args.k, args.backend)
    if found.shape[1] < args.k:
        print(f"hardmix: note: -k {args.k}: {args.embeddings} holds {found.shape[1]} other rows",
              file=sys.stderr)
    print("\n\n".join(format_neighbours(r, items, s, f) for r, s, f in zip(rows, sims, found)))
    return 0


__all__ = ["BACKENDS", "LISTING_KINDS", "beside", "check_finite_rows", "find_listing", "format_listing",
           "format_neighbours", "listing_path", "marker_path", "nearest_rows", "nonfinite_rows",
           "parse_listing", "query_rows", "read_embeddings", "read_listing", "set_paths", "skipped_path",
           "visible", "write_set"]
