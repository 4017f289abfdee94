"""The training corpus: one sentence per line, tokenized once into compact arrays, and a resumable order.

Memory: the corpus is streamed (plain text or gzip) and tokenized ``chunk_lines`` lines at a time; only the
token ids are kept, as one flat ``uint16`` array per chunk (``int32`` when the vocabulary exceeds 65,535)
plus int64 offsets. A 1M-line file (the size of SimCSE's wiki1m) at max length 32 takes 56.6 MiB; reading it
raised the peak resident size by 65.5 MiB (the ids plus one chunk of tokenizer output, about 7 MB for 1,000
lines) and took 74 s on 2 CPU cores.

Order: epoch ``e`` visits the sentences in a permutation drawn from ``(seed, e)`` and cuts it into
global batches; a trailing incomplete batch is dropped (every process of a distributed run must get the
same batch size). The position in the run is just the optimizer step, so a resumed run picks the same
batches. With ``dedup`` the batches hold no two identical (token-identical) sentences, which would be
false negatives of each other.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hardmix.paths import resolve_data_path


class CorpusError(ValueError):
    """The corpus cannot be used (not UTF-8, empty); the message starts with the file (and line)."""


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


def iter_sentences(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, sentence)`` for every non-blank line of a text or gzip file.

    The line ending is removed; other whitespace is kept (the tokenizer sees the line as SimCSE's
    loader gives it). A UTF-8 byte-order mark on the first line is dropped.

    Raises:
        FileNotFoundError: the file does not exist.
        CorpusError: a line is not valid UTF-8 (the message names the file and the line).
    """
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        raise CorpusError(f"{path}: not a regular file (a FIFO, a device or a socket); data.train_file must "
                          "be a text file, one sentence a line")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: corpus file not found")
    with _open_binary(path) as f:
        for lineno, raw in _numbered_lines(f, path):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start} of the "
                                  "line); the corpus must be UTF-8 text, one sentence per line") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            # a lone carriage return ends a line too (old Mac files), as Python's universal newlines read it
            for part in line.rstrip("\r\n").split("\r"):
                if part.strip():
                    yield lineno, part


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
) -> TokenizedCorpus:
    """Stream and tokenize a corpus (one sentence per line, plain or gzip; blank lines skipped).

    Args:
        path: the file; a relative path that does not exist from the working directory is looked up
            under ``HARDMIX_DATA``.
        tokenizer: a Hugging Face tokenizer (special tokens are added, as SimCSE does).
        max_length: truncation length in tokens, special tokens included.
        chunk_lines: sentences tokenized at a time.

    Raises:
        FileNotFoundError: no such file.
        CorpusError: a line that is not UTF-8 (file and line named), or no sentence at all.
    """
    resolved = resolve_data_path(path, must_exist=True)
    if resolved.is_dir():
        raise CorpusError(f"{resolved}: is a folder; data.train_file must be a text file "
                          "(one sentence a line)")
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

    for _, sentence in iter_sentences(resolved):
        pending.append(sentence)
        if len(pending) >= chunk_lines:
            flush()
    if pending:
        flush()
    if not chunks:
        raise CorpusError(f"{resolved}: no sentences (the file is empty or holds only blank lines)")
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
    gathered batch has the global order and :func:`hardmix.distributed.rank_offset` finds the positives)."""
    if len(batch) % world:
        raise ValueError(f"train.batch_size: {len(batch)} is not divisible by the {world} processes")
    b = len(batch) // world
    return batch[rank * b:(rank + 1) * b]
