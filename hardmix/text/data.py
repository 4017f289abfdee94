"""The training corpus: sentences read from a file or a ``datasets`` folder, tokenized once into compact
arrays, and a resumable order.

Formats (:func:`corpus_format`; by the file's extension, case-insensitive):

- plain text, any other name (``.txt``, ``.gz``, none): one sentence a line, gzip detected by its bytes;
- JSON lines, ``.jsonl`` or ``.json`` (``.jsonl.gz``, ``.json.gz``): one object a line, the sentence under
  the key ``text_field``;
- CSV, ``.csv``, and TSV, ``.tsv`` (also ``.gz``): a header row names the columns, the sentence is the
  column ``text_field`` (Python's csv module: fields holding the delimiter or a quote are quoted as
  spreadsheets and pandas write them); a record is one line: a quoted field that does not close on the
  line it opens on (a line break in a sentence, or a sentence that starts with an unpaired quote, which
  would swallow the next records into it) is refused naming both lines, never merged;
- parquet, ``.parquet``: the column ``text_field``, read by row group (needs ``pyarrow``);
- a folder written by ``datasets``' ``Dataset.save_to_disk`` (memory-mapped arrow), the column
  ``text_field``; a ``DatasetDict`` folder only when it holds one split (else name the split's folder).

Every format goes through :func:`iter_sentences`, which yields ``(record number, sentence)``: the line
number for text, JSON lines and CSV (counted from 1), the row number for parquet and arrow (counted from
0, as ``dataset[i]``). A blank or whitespace-only sentence, and a null value, are skipped like a blank
line. Anything else that cannot be a sentence is a :class:`CorpusError` of one line naming the file and
the record.

Memory: the corpus is streamed and tokenized ``chunk_lines`` sentences at a time; only the token ids are
kept, as one flat ``uint16`` array per chunk (``int32`` when the vocabulary exceeds 65,535) plus int64
offsets. A 1M-line file (the size of SimCSE's wiki1m) at max length 32 takes 56.6 MiB; reading it raised
the peak resident size by 65.5 MiB (the ids plus one chunk of tokenizer output, about 7 MB for 1,000
lines) and took 74 s on 2 CPU cores.

Order: epoch ``e`` visits the sentences in a permutation drawn from ``(seed, e)`` and cuts it into
global batches; a trailing incomplete batch is dropped (every process of a distributed run must get the
same batch size). The position in the run is just the optimizer step, so a resumed run picks the same
batches. With ``dedup`` the batches hold no two identical (token-identical) sentences, which would be
false negatives of each other.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib
import io
import json
import os
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hardmix.datasets.paths import resolve_data_path


class CorpusError(ValueError):
    """The corpus cannot be used (not UTF-8, a bad record, empty); the message starts with the file (and
    the record)."""


#: Extensions of the formats with named fields (the longest first); any other name is plain text.
FORMATS = {".jsonl.gz": "jsonl", ".json.gz": "jsonl", ".csv.gz": "csv", ".tsv.gz": "tsv", ".jsonl": "jsonl",
           ".json": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
#: Files of which one marks a folder written by ``datasets``' ``save_to_disk``.
DATASETS_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
#: The library each format needs beyond the standard library (the pip extra ``corpora`` brings them).
_LIBRARIES = {"parquet": "pyarrow.parquet", "arrow": "datasets"}
#: Rows per batch read from parquet and arrow.
_BATCH_ROWS = 4096


def _open_binary(path: Path) -> io.BufferedIOBase:
    """Open ``path`` for reading bytes, transparently un-gzipping (detected by the magic bytes)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _numbered_lines(f: io.BufferedIOBase, path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)``; a damaged gzip stream is a CorpusError naming the line it broke at."""
    lineno = 0
    try:
        for lineno, raw in enumerate(f, start=1):  # noqa: B007 (the last number names the broken line)
            yield lineno, raw
    except (EOFError, OSError, zlib.error) as e:
        if not isinstance(f, gzip.GzipFile):
            raise
        raise CorpusError(f"{path}:{lineno + 1}: not a complete gzip file ({e}); the file is truncated or "
                          "damaged: compress it again, or give the uncompressed text") from None


def _decoded_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text or gzip file, decoded as UTF-8 (line endings kept, a byte-order
    mark on the first line dropped); ``what`` ends the message of a line that is not UTF-8."""
    with _open_binary(path) as f:
        for lineno, raw in _numbered_lines(f, path):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the "
                                  f"line); {what}") from None
            yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line


def _names(keys: Iterable[str]) -> str:
    """Up to 20 keys or columns, for a message."""
    keys = [str(k) for k in keys]
    return ", ".join(repr(k) for k in keys[:20]) + (f", ... ({len(keys)} in all)" if len(keys) > 20 else "")


def _sentence(value: Any, where: str, field: str) -> str | None:
    """``value`` as a sentence: a non-blank string; None for null and blank strings (skipped)."""
    if isinstance(value, str):
        return value if value.strip() else None
    if value is None:
        return None
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    raise CorpusError(f"{where}: {field!r} (data.text_field) holds a value of type {type(value).__name__} "
                      f"({shown}), not a string; the sentence must be text")


def _text_sentences(path: Path, field: str) -> Iterator[tuple[int, str]]:
    """Plain text: every non-blank line; a lone carriage return ends a line too (old Mac files), as
    Python's universal newlines read it."""
    for lineno, line in _decoded_lines(path, "the corpus must be UTF-8 text, one sentence per line"):
        for part in line.rstrip("\r\n").split("\r"):
            if part.strip():
                yield lineno, part


def _jsonl_sentences(path: Path, field: str) -> Iterator[tuple[int, str]]:
    """JSON lines: one object a line, the sentence under ``field``; blank lines skipped."""
    for lineno, line in _decoded_lines(path, "a JSON lines corpus must be UTF-8"):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{where}: not valid JSON ({e.msg.removesuffix(' at')} at column {e.colno}); a "
                              "JSON lines corpus holds one object a line") from None
        if not isinstance(record, dict):
            kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
                type(record), "a number")
            raise CorpusError(f"{where}: {kind}, not a JSON object; a JSON lines corpus holds one object a "
                              f"line, such as {{\"{field}\": \"A sentence .\"}}")
        if field not in record:
            raise CorpusError(f"{where}: no key {field!r} (data.text_field); the line's keys: "
                              f"{_names(record) or '(none)'}")
        sentence = _sentence(record[field], where, field)
        if sentence is not None and "\\u" in line:  # an escaped lone surrogate decodes to no valid text
            try:
                sentence.encode("utf-8")
            except UnicodeEncodeError:
                raise CorpusError(f"{where}: {field!r} holds an escaped lone surrogate (\\ud800 to \\udfff), "
                                  "not valid Unicode text") from None
        if sentence is not None:
            yield lineno, sentence


def _csv_sentences(path: Path, field: str, delimiter: str = ",") -> Iterator[tuple[int, str]]:
    """CSV (or TSV): the header row names the columns, the sentence is column ``field``; blank lines
    skipped; the record's number is the line it starts on."""
    kind = "TSV" if delimiter == "\t" else "CSV"
    rows = csv.reader((line for _, line in _decoded_lines(path, f"a {kind} corpus must be UTF-8")),
                      delimiter=delimiter, strict=True)
    header: list[str] | None = None
    column = 0
    while True:
        start = rows.line_num + 1
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as e:
            if rows.line_num > start and "end of data" not in str(e):  # a quote ran over the line
                _merged(path, start, rows.line_num, kind)
            raise CorpusError(f"{path}:{start}: not valid {kind} ({e}); quote a field holding the delimiter, "
                              "a quote or a line break, and double the quotes inside it") from None
        if rows.line_num > start:  # a quoted field ran over the line's end: records would merge
            _merged(path, start, rows.line_num, kind)
        if not row:  # a blank line
            continue
        if header is None:
            if field not in row:
                raise CorpusError(f"{path}:{start}: no column {field!r} (data.text_field) in the header row; "
                                  f"its columns: {_names(row)}")
            header, column = row, row.index(field)
        elif len(row) != len(header):
            raise CorpusError(f"{path}:{start}: {len(row)} fields where the header row has {len(header)}; "
                              "quote a field holding the delimiter")
        elif row[column].strip():
            yield start, row[column]


def _merged(path: Path, start: int, end: int, kind: str) -> None:
    """Refuse a record running from line ``start`` to ``end`` (a quoted field over a line's end)."""
    raise CorpusError(
        f"{path}:{start}: a quoted field opens on this line and runs on to line {end}; a {kind} record is "
        'one line, so records are never merged: a sentence starting with a quote is quoted whole with its '
        'quotes doubled ("""Hi"" she said ."), and a line break in a sentence is refused (give such '
        "sentences as JSON lines)")


def _column_sentences(source: Path, batches: Iterator[Any], field: str) -> Iterator[tuple[int, str]]:
    """``(row, sentence)`` of a column read as pyarrow arrays, batch by batch (rows counted from 0)."""
    import pyarrow as pa

    row = 0
    while True:
        try:
            values = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as e:
            raise CorpusError(f"{source}: row {row}: cannot be read ({str(e).splitlines()[0]}); the data "
                              "is damaged") from None
        try:
            items = values.to_pylist()
        except UnicodeDecodeError:  # find the row
            for i in range(len(values)):
                try:
                    values[i].as_py()
                except UnicodeDecodeError as e:
                    raise CorpusError(f"{source}: row {row + i}: not valid UTF-8 ({e.reason} at byte "
                                      f"{e.start}); the sentences must be UTF-8 text") from None
            raise
        for i, value in enumerate(items, start=row):
            sentence = _sentence(value, f"{source}: row {i}", field)
            if sentence is not None:
                yield i, sentence
        row += len(items)


def _parquet_sentences(path: Path, field: str) -> Iterator[tuple[int, str]]:
    """Parquet: column ``field``, read a batch of rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except pa.ArrowException as e:
        raise CorpusError(f"{path}: not a readable parquet file ({str(e).splitlines()[0]})") from None
    with pf:
        if field not in pf.schema_arrow.names:
            raise CorpusError(f"{path}: no column {field!r} (data.text_field); its columns: "
                              f"{_names(pf.schema_arrow.names)}")
        batches = (b.column(0) for b in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[field]))
        yield from _column_sentences(path, batches, field)


def _single_split(path: Path) -> Path:
    """The folder of the one split of a ``DatasetDict`` folder (its ``dataset_dict.json`` lists them)."""
    try:
        splits = [str(x) for x in json.loads((path / "dataset_dict.json").read_text("utf-8"))["splits"]]
    except (ValueError, KeyError, TypeError) as e:
        damaged = f"{path}: dataset_dict.json is damaged ({e!r}); save the DatasetDict again"
        raise CorpusError(damaged) from None
    if len(splits) != 1:
        raise CorpusError(f"{path}: a DatasetDict folder of {len(splits)} splits ({_names(splits)}): name "
                          f"one in data.train_file, e.g. {path / (splits[0] if splits else 'train')}")
    return path / splits[0]


def _arrow_sentences(path: Path, field: str) -> Iterator[tuple[int, str]]:
    """A ``save_to_disk`` folder: column ``field`` of the memory-mapped dataset, a batch of rows at a
    time (of a ``DatasetDict`` folder, its one split's)."""
    import datasets

    if (path / "dataset_dict.json").is_file():
        path = _single_split(path)
    try:
        ds = datasets.load_from_disk(str(path))
    except (OSError, ValueError) as e:
        raise CorpusError(f"{path}: not a readable datasets folder ({str(e).splitlines()[0]})") from None
    if field not in ds.column_names:
        raise CorpusError(f"{path}: no column {field!r} (data.text_field); its columns: "
                          f"{_names(ds.column_names)}")
    arrow = ds.select_columns([field]).with_format("arrow")
    yield from _column_sentences(path, (t.column(0) for t in arrow.iter(batch_size=_BATCH_ROWS)), field)


def corpus_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files a corpus is read from, in the order they are read (its fingerprint's files:
    :meth:`hardmix.text.task.TextFacts.data_fingerprint`): a corpus file itself; of a ``save_to_disk``
    folder (of a ``DatasetDict`` folder, its one split's), the arrow files its ``state.json`` lists, which
    are those ``datasets.load_from_disk`` maps, whatever their names (its JSON files only say which files
    and how they are typed; their ``datasets`` fingerprints change at each save).

    Raises:
        CorpusError: a folder whose ``state.json`` is missing or damaged, naming it.

    >>> corpus_files("wiki/wiki1m.txt")
    [PosixPath('wiki/wiki1m.txt')]
    """
    path = Path(path)
    if not path.is_dir():
        return [path]
    if (path / "dataset_dict.json").is_file():
        path = _single_split(path)
    state = path / "state.json"
    try:
        files = json.loads(state.read_text("utf-8"))["_data_files"]
        return [path / str(f["filename"]) for f in files]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{state}: cannot list the arrow files of the datasets folder ({e!r}); save the "
                          "dataset again") from None


_READERS = {"text": _text_sentences, "jsonl": _jsonl_sentences, "csv": _csv_sentences,
            "tsv": lambda path, field: _csv_sentences(path, field, "\t"), "parquet": _parquet_sentences,
            "arrow": _arrow_sentences}


def corpus_format(path: str | os.PathLike[str], text_field: str = "text") -> str:
    """The format ``path`` is read as: ``text``, ``jsonl``, ``csv``, ``tsv``, ``parquet`` (by the name's
    extension), or ``arrow`` (a ``save_to_disk`` folder), after checking it can be read at all.

    Args:
        path: the corpus (resolved: no lookup under the data root).
        text_field: the key or column of the sentences (``data.text_field``); plain text has none.

    Raises:
        CorpusError: a folder that ``datasets`` did not write (or a ``DatasetDict`` of several splits), a
            FIFO or device, ``text_field`` other than ``text`` for plain text, or the library a format
            needs not installed.

    Example:
        >>> corpus_format("wiki/wiki1m.txt"), corpus_format("c.JSONL.gz"), corpus_format("c.tsv", "s")
        ('text', 'jsonl', 'tsv')
    """
    path = Path(path)
    if path.is_dir():
        if not any((path / m).is_file() for m in DATASETS_MARKERS):
            raise CorpusError(f"{path}: is a folder, and not one that datasets' save_to_disk wrote (no "
                              f"{', '.join(DATASETS_MARKERS)}); data.train_file must be a corpus file "
                              "(.txt, .gz, .jsonl, .json, .csv, .tsv, .parquet) or such a folder")
        if (path / "dataset_dict.json").is_file():
            _single_split(path)
        fmt = "arrow"
    elif path.exists() and not path.is_file():
        raise CorpusError(f"{path}: not a regular file (a FIFO, a device or a socket); data.train_file must "
                          "be a corpus file (one sentence a line, JSON lines, CSV, parquet) or a datasets "
                          "folder")
    else:
        name = path.name.lower()
        fmt = next((f for ext, f in FORMATS.items() if name.endswith(ext)), "text")
    if fmt == "text" and text_field != "text":
        raise CorpusError(f"{path}: data.text_field is {text_field!r}, but this is a plain text corpus (one "
                          "sentence a line, no fields): leave data.text_field out, or give a .jsonl, .csv, "
                          ".tsv or .parquet file or a datasets folder")
    if fmt in _LIBRARIES:
        try:
            importlib.import_module(_LIBRARIES[fmt])
        except ImportError:
            raise CorpusError(f"{path}: reading a {fmt} corpus needs {_LIBRARIES[fmt].split('.')[0]}: "
                              "pip install 'hardmix[corpora]'") from None
    return fmt


def iter_sentences(path: str | os.PathLike[str], text_field: str = "text") -> Iterator[tuple[int, str]]:
    """Yield ``(record number, sentence)`` for every non-blank sentence of a corpus in any format (see the
    module's docstring; the record number is the line for text, JSON lines and CSV, the row for parquet
    and arrow).

    Plain text: the line ending is removed; other whitespace is kept (the tokenizer sees the line as
    SimCSE's loader gives it). A UTF-8 byte-order mark on the first line is dropped.

    Args:
        path: the file or ``save_to_disk`` folder.
        text_field: the key or column holding the sentence (not for plain text).

    Raises:
        FileNotFoundError: the file does not exist.
        CorpusError: a record that is no sentence (not UTF-8, not JSON, no ``text_field``, a number, a
            row of the wrong length, ...): one line naming the file and the record; or a path that
            :func:`corpus_format` refuses.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: corpus file not found")
    yield from _READERS[corpus_format(path, text_field)](path, text_field)


class TokenizedCorpus:
    """Token ids of every sentence, in compact chunks.

    Attributes:
        path: the source file.
        dtype: numpy dtype of the ids (uint16 or int32).

    Use ``len(corpus)`` and ``corpus[i]`` (a 1-D numpy array of ids, special tokens included).
    """

    def __init__(self, path: Path, chunks: list[np.ndarray], offsets: list[np.ndarray]) -> None:
        self.path = path
        self._chunks = chunks
        self._offsets = offsets
        sizes = [len(o) - 1 for o in offsets]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.dtype = chunks[0].dtype if chunks else np.dtype(np.int32)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < len(self):
            raise IndexError(f"sentence {i} out of range (corpus of {len(self)})")
        c = int(np.searchsorted(self._starts, i, side="right")) - 1
        j = i - int(self._starts[c])
        off = self._offsets[c]
        return self._chunks[c][off[j]:off[j + 1]]

    @property
    def num_tokens(self) -> int:
        """Total token ids stored."""
        return int(sum(len(c) for c in self._chunks))

    @property
    def nbytes(self) -> int:
        """Bytes held by the ids and offsets."""
        return int(sum(c.nbytes for c in self._chunks) + sum(o.nbytes for o in self._offsets))

    def lengths(self) -> np.ndarray:
        """(n,) number of tokens of each sentence."""
        return np.concatenate([np.diff(o) for o in self._offsets]) if self._offsets else np.zeros(0, np.int64)

    def keys(self) -> np.ndarray:
        """(n,) int64 hash of each sentence's token ids (equal ids, equal key), for deduplication."""
        out = np.empty(len(self), dtype=np.int64)
        k = 0
        for chunk, off in zip(self._chunks, self._offsets):
            for j in range(len(off) - 1):
                digest = hashlib.blake2b(chunk[off[j]:off[j + 1]].tobytes(), digest_size=8).digest()
                out[k] = int.from_bytes(digest, "little", signed=True)
                k += 1
        return out


def read_corpus(
    path: str | os.PathLike[str],
    tokenizer: Any,
    max_length: int,
    chunk_lines: int = 1_000,
    text_field: str = "text",
) -> TokenizedCorpus:
    """Stream and tokenize a corpus in any format of :func:`iter_sentences` (blank sentences skipped).

    Args:
        path: the file or ``save_to_disk`` folder; a relative path that does not exist from the working
            directory is looked up under ``HARDMIX_DATA``.
        tokenizer: a Hugging Face tokenizer (special tokens are added, as SimCSE does).
        max_length: truncation length in tokens, special tokens included.
        chunk_lines: sentences tokenized at a time.
        text_field: the key or column holding the sentence (JSON lines, CSV, parquet, arrow).

    Raises:
        FileNotFoundError: no such file.
        CorpusError: a record that is no sentence (file and record named), or no sentence at all.
    """
    resolved = resolve_data_path(path, must_exist=True)
    fmt = corpus_format(resolved, text_field)
    vocab = len(tokenizer)
    dtype = np.uint16 if vocab <= np.iinfo(np.uint16).max + 1 else np.int32
    chunks: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    pending: list[str] = []

    def flush() -> None:
        ids = tokenizer(pending, truncation=True, max_length=max_length, add_special_tokens=True,
                        return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((t for seq in ids for t in seq), dtype=dtype, count=int(lengths.sum()))
        off = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=off[1:])
        chunks.append(flat)
        offsets.append(off)
        pending.clear()

    for _, sentence in iter_sentences(resolved, text_field):
        pending.append(sentence)
        if len(pending) >= chunk_lines:
            flush()
    if pending:
        flush()
    if not chunks:
        why = ("the file is empty or holds only blank lines" if fmt == "text"
               else f"no record holds a non-blank {text_field!r}")
        raise CorpusError(f"{resolved}: no sentences ({why})")
    return TokenizedCorpus(resolved, chunks, offsets)


def _dedup_batches(order: np.ndarray, key_array: np.ndarray, batch_size: int) -> np.ndarray:
    """Cut ``order`` into full batches without repeated keys inside a batch.

    Greedy and deterministic: a sentence whose key is already in the batch being filled waits (in order)
    and goes into the first later batch that does not hold its key. Batches that cannot be completed at
    the end are dropped. Returns (num_batches, batch_size) indices.
    """
    keys = key_array.tolist()
    waiting: deque[int] = deque()
    batches: list[list[int]] = []
    stream = iter(order.tolist())
    exhausted = False
    while True:
        batch: list[int] = []
        seen: set[int] = set()
        for _ in range(len(waiting)):
            i = waiting.popleft()
            if len(batch) < batch_size and keys[i] not in seen:
                batch.append(i)
                seen.add(keys[i])
            else:
                waiting.append(i)
        while len(batch) < batch_size and not exhausted:
            i = next(stream, None)
            if i is None:
                exhausted = True
                break
            if keys[i] in seen:
                waiting.append(i)
            else:
                batch.append(i)
                seen.add(keys[i])
        if len(batch) < batch_size:
            break
        batches.append(batch)
    return np.asarray(batches, dtype=np.int64).reshape(-1, batch_size)


class BatchOrder:
    """The batches of every epoch: deterministic given (seed, epoch), so any step can be recomputed.

    Args:
        n: corpus size.
        batch_size: the global batch.
        seed: the run's seed.
        keys: optional (n,) sentence keys; when given, no batch holds two equal keys.

    Example:
        >>> order = BatchOrder(10, batch_size=4, seed=0)
        >>> order.batches_per_epoch(0), order.batch(0, 1).shape
        (2, (4,))
    """

    def __init__(self, n: int, batch_size: int, seed: int, keys: np.ndarray | None = None) -> None:
        if n < batch_size:
            raise CorpusError(f"the corpus has {n} sentences, fewer than one batch of {batch_size} "
                              "(train.batch_size): lower train.batch_size or use a larger corpus")
        self.n = n
        self.batch_size = batch_size
        self.seed = seed
        self.keys = keys
        self._cache: tuple[int, np.ndarray] | None = None

    def permutation(self, epoch: int) -> np.ndarray:
        """The visiting order of epoch ``epoch``: a permutation of range(n) drawn from (seed, epoch)."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch, 0x5E47])))
        return rng.permutation(self.n)

    def epoch_batches(self, epoch: int) -> np.ndarray:
        """(num_batches, batch_size) sentence indices of epoch ``epoch`` (cached for the current epoch)."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        perm = self.permutation(epoch)
        if self.keys is None:
            m = self.n // self.batch_size
            batches = perm[: m * self.batch_size].reshape(m, self.batch_size)
        else:
            batches = _dedup_batches(perm, self.keys, self.batch_size)
            if len(batches) == 0:
                raise CorpusError("data.dedup_batches: not a single batch without duplicate sentences can be "
                                  "formed; the corpus has too few distinct sentences for train.batch_size")
        self._cache = (epoch, batches)
        return batches

    def batches_per_epoch(self, epoch: int) -> int:
        return int(self.epoch_batches(epoch).shape[0])

    def batch(self, epoch: int, position: int) -> np.ndarray:
        """(batch_size,) indices of global batch ``position`` of epoch ``epoch``."""
        return self.epoch_batches(epoch)[position]

    def schedule(self, epochs: int) -> list[int]:
        """Batches of each epoch (equal without dedup; computed per epoch with it)."""
        if self.keys is None:
            return [self.n // self.batch_size] * epochs
        return [self.batches_per_epoch(e) for e in range(epochs)]


def collate(
    corpus: TokenizedCorpus,
    indices: np.ndarray,
    pad_token_id: int,
    with_token_type_ids: bool = True,
) -> dict[str, Tensor]:
    """Pad the sentences ``indices`` to the longest one.

    Returns:
        ``input_ids`` and ``attention_mask`` (B, T) int64, and ``token_type_ids`` (all 0) when asked.
    """
    seqs = [corpus[int(i)] for i in indices]
    t = max(len(s) for s in seqs)
    ids = np.full((len(seqs), t), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(seqs), t), dtype=np.int64)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = s
        mask[r, : len(s)] = 1
    out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    if with_token_type_ids:
        out["token_type_ids"] = torch.zeros_like(out["input_ids"])
    return out


def shard(batch: np.ndarray, rank: int, world: int) -> np.ndarray:
    """This process's contiguous slice of a global batch (rank r gets rows r*B .. r*B + B - 1, so the
    gathered batch has the global order and :func:`hardmix.ops.distributed.rank_offset` finds the
    positives)."""
    if len(batch) % world:
        raise ValueError(f"train.batch_size: {len(batch)} is not divisible by the {world} processes")
    b = len(batch) // world
    return batch[rank * b:(rank + 1) * b]
