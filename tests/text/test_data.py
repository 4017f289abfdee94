"""The corpus reader and the batch order of the text trainer."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from hardmix.text.data import BatchOrder, CorpusError, collate, iter_sentences, read_corpus, shard


@pytest.fixture(scope="module")
def tokenizer(bert_mini_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bert_mini_path)


def test_plain_and_gzip_read_the_same(tmp_path, tokenizer, wiki_sentences):
    lines = wiki_sentences[:50]
    plain = tmp_path / "c.txt"
    plain.write_text("\n".join(lines[:25]) + "\n\n   \n" + "\r\n".join(lines[25:]) + "\n", encoding="utf-8")
    packed = tmp_path / "c.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    a = read_corpus(plain, tokenizer, max_length=32, chunk_lines=7)
    b = read_corpus(packed, tokenizer, max_length=32, chunk_lines=1000)
    assert len(a) == len(b) == 50  # blank and whitespace-only lines skipped, CRLF handled
    assert a.dtype == np.uint16  # a 30,522-token vocabulary fits in 16 bits
    for i in range(50):
        ref = tokenizer(lines[i], truncation=True, max_length=32)["input_ids"]
        assert a[i].tolist() == b[i].tolist() == ref
    assert a.lengths().max() <= 32
    assert a.nbytes < 50 * (32 * 2 + 8) + 64 * 8


def test_not_utf8_names_file_and_line(tmp_path, tokenizer):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"first line\nsecond line\n" + b"caf\xe9 latin-1\nlast\n")
    with pytest.raises(CorpusError, match=r"bad\.txt:3: not valid UTF-8"):
        read_corpus(path, tokenizer, max_length=32)


def test_missing_and_empty_corpus(tmp_path, tokenizer):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_corpus(tmp_path / "nope.txt", tokenizer, max_length=32)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n")
    with pytest.raises(CorpusError, match="no sentences"):
        read_corpus(empty, tokenizer, max_length=32)


def test_bom_dropped(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffhello\nworld\n".encode())
    assert [s for _, s in iter_sentences(path)] == ["hello", "world"]


def test_order_is_deterministic_and_covers_the_epoch():
    order = BatchOrder(103, batch_size=10, seed=3)
    again = BatchOrder(103, batch_size=10, seed=3)
    e0 = order.epoch_batches(0)
    assert e0.shape == (10, 10) and len(set(e0.ravel().tolist())) == 100  # last 3 sentences dropped
    assert np.array_equal(e0, again.epoch_batches(0))
    assert not np.array_equal(e0, order.epoch_batches(1))
    assert not np.array_equal(e0, BatchOrder(103, batch_size=10, seed=4).epoch_batches(0))
    assert np.array_equal(order.batch(1, 3), again.epoch_batches(1)[3])


def test_dedup_keeps_duplicates_out_of_a_batch():
    keys = np.array([i % 7 for i in range(70)])  # 7 distinct sentences, 10 copies each
    order = BatchOrder(70, batch_size=7, seed=0, keys=keys)
    batches = order.epoch_batches(0)
    assert len(batches) == 10
    for b in batches:
        assert len(set(keys[b].tolist())) == 7
    assert sorted(batches.ravel().tolist()) == list(range(70))
    plain = BatchOrder(70, batch_size=7, seed=0).epoch_batches(0)
    assert any(len(set(keys[b].tolist())) < 7 for b in plain)  # without it, duplicates do share batches


def test_dedup_on_a_real_corpus(tmp_path, tokenizer, wiki_sentences):
    path = tmp_path / "dups.txt"
    lines = wiki_sentences[:40] * 3
    path.write_text("\n".join(lines) + "\n")
    corpus = read_corpus(path, tokenizer, max_length=32)
    keys = corpus.keys()
    assert len(set(keys.tolist())) == 40
    for b in BatchOrder(len(corpus), 16, seed=1, keys=keys).epoch_batches(0):
        assert len(set(keys[b].tolist())) == 16


def test_too_small_corpus():
    with pytest.raises(CorpusError, match="fewer than one batch"):
        BatchOrder(5, batch_size=8, seed=0)


def test_collate_and_shard(tmp_path, tokenizer, wiki_sentences):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(wiki_sentences[:8]) + "\n")
    corpus = read_corpus(path, tokenizer, max_length=16)
    batch = collate(corpus, np.arange(4), tokenizer.pad_token_id)
    ref = tokenizer(wiki_sentences[:4], truncation=True, max_length=16, padding=True, return_tensors="pt")
    for k in ("input_ids", "attention_mask", "token_type_ids"):
        assert batch[k].tolist() == ref[k].tolist()
    g = np.arange(8)
    assert shard(g, 1, 2).tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="divisible"):
        shard(g, 0, 3)
