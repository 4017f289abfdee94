"""The quickstart's model on a fresh machine: ``hardmix data download bert-mini`` over a local mirror in
the Hub's file format, and ``models/bert-mini-wiki-mlm`` falling back to that public stand-in."""

from __future__ import annotations

import dataclasses
import hashlib
import logging

import pytest
import torch

from hardmix.datasets import SOURCES, download
from hardmix.text.model_source import ModelNotFoundError, resolve_model
from tests.core.http_server import LocalServer


@pytest.fixture
def bert_mirror(tmp_path, bert_mini_path, monkeypatch):
    """A mirror holding bert-mini/{config.json, vocab.txt, pytorch_model.bin} as the Hub serves them for
    google/bert_uncased_L-4_H-256_A-4 (a small random BERT with the real WordPiece vocabulary)."""
    from transformers import BertConfig, BertModel

    folder = tmp_path / "mirror" / "bert-mini"
    folder.mkdir(parents=True)
    vocab = (bert_mini_path / "vocab.txt").read_text(encoding="utf-8")
    config = BertConfig(vocab_size=len(vocab.splitlines()), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = BertModel(config)
    (folder / "config.json").write_text(config.to_json_string())
    (folder / "vocab.txt").write_text(vocab, encoding="utf-8")
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    # the registry pins the real weights by the Hub's SHA-256: this small model's stands in for it
    key = "bert-mini/pytorch_model.bin"
    monkeypatch.setitem(SOURCES, key, dataclasses.replace(SOURCES[key], sha256=hashlib.sha256(
        (folder / "pytorch_model.bin").read_bytes()).hexdigest()))
    with LocalServer(tmp_path / "mirror") as srv:
        yield srv, model


def test_bert_mini_downloads_and_stands_in_for_the_local_model(bert_mirror, tmp_path, monkeypatch, caplog):
    from transformers import AutoModel, AutoTokenizer

    srv, original = bert_mirror
    root = tmp_path / "root"
    [outcome] = download(["bert-mini"], root=root, base_url=srv.url, progress=False)
    folder = root / "models" / "bert-mini"
    assert outcome.path == folder and (folder / "README.md").is_file()
    monkeypatch.setenv("HARDMIX_DATA", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with caplog.at_level(logging.WARNING, logger="hardmix.text.model_source"):
        path, local_only = resolve_model("models/bert-mini-wiki-mlm")
    assert (path, local_only) == (str(folder), True)
    [record] = caplog.records
    assert "public stand-in google/bert_uncased_L-4_H-256_A-4 from" in record.getMessage()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    assert tok.tokenize("Hello World") == ["hello", "world"]  # the uncased WordPiece
    loaded = AutoModel.from_pretrained(path, local_files_only=True).eval()
    ids = torch.tensor([tok("A man plays a guitar.")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).last_hidden_state, original.eval()(ids).last_hidden_state)


def test_offline_without_the_stand_in_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("HARDMIX_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    with pytest.raises(ModelNotFoundError, match=r"bert-mini-wiki-mlm is not a local folder .*offline mode .*"
                                                 r"`hardmix data download bert-mini`") as e:
        resolve_model("models/bert-mini-wiki-mlm")
    assert "\n" not in str(e.value)
    with pytest.raises(ModelNotFoundError, match=r"'someone/no-such-model' is not a local folder .*offline"):
        resolve_model("someone/no-such-model")
