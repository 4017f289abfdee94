"""Encoding sentences with a trained (or any) encoder: :func:`encode` and ``hardmix encode``.

``hardmix encode MODEL < sentences.txt > embeddings.npy`` reads one sentence per line from standard input
(UTF-8; row i of the array is line i) and writes a float32 ``(n, D)`` array in NumPy's ``.npy`` format to
standard output (or ``--output``). Encoding goes through :class:`hardmix.text.encoder.SentenceEncoder`,
so a hardmix export is pooled as it was evaluated.

With ``--output EMB.npy`` the sentences are also written beside it, ``EMB.sentences.txt`` (one a line, in
row order; :func:`hardmix.commands.neighbours.listing_path`), so that ``hardmix neighbours
EMB.npy "a sentence"`` can show them: the array and its listing are replaced together or not at all
(:func:`hardmix.commands.neighbours.write_set`; a full disk keeps the previous pair and names the file);
it is checked like ``--output`` before any work (never one of the
command's inputs nor a model's file). An ``--output`` that is not a regular file (``/dev/stdout``, a pipe)
gets no listing. The command line is the core's ``encode`` (:class:`hardmix.cli.EncodeCommand`), of which
sentences on standard input are the input taken when no other (``--images``) is given.

Embeddings or weights that are not finite are refused: the model's tensors when it is loaded (naming
them), the array's rows before anything is written (naming them).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def encode(
    model_or_path: Any,
    sentences: Sequence[str],
    batch_size: int = 64,
    pooling: str | None = None,
    max_length: int | None = None,
) -> np.ndarray:
    """Embed sentences with an encoder.

    Args:
        model_or_path: a model folder (hardmix export, Hugging Face or sentence-transformers folder; a
            relative path that does not exist here is looked up under ``HARDMIX_DATA``),
            a :class:`~hardmix.text.encoder.SentenceEncoder`, or a
            :class:`~hardmix.text.model.ContrastiveSentenceModel` (the trainer's model; its evaluation
            pooling is used).
        sentences: n sentences.
        batch_size: sentences per forward pass.
        pooling: override the pooling (``cls``, ``cls_before_pooler``, ``avg``, ``avg_first_last``);
            default: the model's own (a hardmix export knows it), else ``cls``.
        max_length: truncation in tokens (default: the model's limit).

    Returns:
        (n, D) float32 embeddings.

    Example:
        >>> from hardmix.text import encode
        >>> emb = encode("runs/mixcse/best", ["a man plays a guitar ."])  # doctest: +SKIP
        >>> emb.shape, emb.dtype  # doctest: +SKIP
        ((1, 256), dtype('float32'))
    """
    from hardmix.datasets.paths import resolve_data_path
    from hardmix.text.encoder import SentenceEncoder
    from hardmix.text.model import ContrastiveSentenceModel
    from hardmix.training.checkpoint import check_finite_weights

    if isinstance(model_or_path, ContrastiveSentenceModel):
        if pooling is not None and pooling != model_or_path.eval_pooling:
            raise ValueError(f"pooling: the in-memory model encodes with its own pooling "
                             f"{model_or_path.eval_pooling!r}; export it to use another")
        return model_or_path.encode(sentences, batch_size=batch_size, max_length=max_length)
    if isinstance(model_or_path, SentenceEncoder):
        if pooling is not None and pooling != model_or_path.pooling:
            raise ValueError(f"pooling: this SentenceEncoder pools with {model_or_path.pooling!r}; "
                             "build one with the pooling you want")
        return model_or_path.encode(list(sentences), batch_size=batch_size, max_length=max_length)
    if not isinstance(model_or_path, (str, os.PathLike)):
        raise TypeError(f"encode: expected a model folder, a SentenceEncoder or a ContrastiveSentenceModel, "
                        f"got {type(model_or_path).__name__}")
    path = resolve_data_path(model_or_path)  # relative folders: from here, else under HARDMIX_DATA
    encoder = SentenceEncoder(path, pooling=pooling, max_length=max_length, batch_size=batch_size,
                              cache=False)
    check_finite_weights(encoder.model.state_dict(), f"MODEL {path}")
    return encoder.encode(list(sentences), batch_size=batch_size)


def read_lines(stream: io.TextIOBase | Any) -> list[str]:
    r"""Sentences from a text stream, one a line (line endings removed; blank lines kept as rows): row i is
    line i. Only ``\n`` ends a line (a ``\r\n`` ending loses its ``\r``); a lone ``\r`` inside a line is
    part of it, so open the stream with ``newline="\n"`` (universal newlines would split the line there).

    >>> read_lines(io.TextIOWrapper(io.BytesIO(b"a\rb\nc\r\n"), encoding="utf-8", newline="\n"))
    ['a\rb', 'c']
    """
    return [line.removesuffix("\n").removesuffix("\r") for line in stream]


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix encode MODEL [--pooling P] [--batch-size N] [--max-length L] [--output FILE]``: sentences
    from standard input to a ``.npy`` array (and ``FILE``'s ``.sentences.txt`` listing beside it)."""
    from hardmix.cli import check_output_beside
    from hardmix.commands.neighbours import check_finite_rows, listing_path, write_set
    from hardmix.utils.confine import open_for_write, save_numpy_to

    out_path = getattr(args, "output", None)
    if out_path is None and sys.stdout.isatty():
        raise ValueError("encode: refusing to write a binary .npy array to a terminal; redirect standard "
                         "output (> embeddings.npy) or pass --output")
    listing = None  # the sentences beside a regular --output file, for hardmix neighbours
    regular = out_path is not None and (os.path.isfile(out_path) or not os.path.exists(out_path))
    if regular and not str(out_path).endswith(".npy"):  # neighbours reads EMB.npy and its listing only
        raise ValueError(f"--output: {out_path} must end in .npy (the array hardmix neighbours reads, with "
                         "its listing EMB.sentences.txt beside it)")
    if regular:
        listing = listing_path(out_path, "sentences")
        check_output_beside(args, listing)
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict", newline="\n")
    try:
        sentences = read_lines(stdin)
    except UnicodeDecodeError as e:
        raise ValueError(f"encode: standard input is not UTF-8 text ({e.reason})") from None
    emb = encode(args.model, sentences, batch_size=args.batch_size, pooling=args.pooling,
                 max_length=args.max_length)
    from hardmix.training.run_folder import unfinished_note

    if (note := unfinished_note(args.model)) is not None:  # as export says it
        print(f"hardmix: note: {note}", file=sys.stderr)
    check_finite_rows(emb, f"encode: the embeddings of MODEL {args.model}")
    if listing is not None and out_path is not None:  # replaced together (a full disk keeps the old)
        _, note = write_set(out_path, emb, "sentences", sentences)
        if note:
            print(f"hardmix: note: {note}", file=sys.stderr)
    elif out_path is not None:  # not a regular file (/dev/stdout, a pipe): written as a stream
        with open_for_write(out_path, Path(out_path).parent, "wb") as f:
            save_numpy_to(emb, f)
    else:
        save_numpy_to(emb, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    print(f"hardmix: encoded {emb.shape[0]} sentences to {emb.shape[1]} dimensions", file=sys.stderr)
    return 0
