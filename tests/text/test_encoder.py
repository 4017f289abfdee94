"""SentenceEncoder: poolings against a direct transformers computation, the cache, the three folder kinds."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

SENTENCES = [
    "a man is playing a guitar .",
    "",
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat .",
    "hi",
    "a man is playing a guitar .",  # a duplicate
]


def _reference(folder, sentences, pooling):
    """Each sentence alone (no padding), straight from transformers."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for s in sentences:
            b = tok([s], return_tensors="pt")
            o = model(**b, output_hidden_states=True)
            if pooling in ("cls", "cls_before_pooler"):
                out.append(o.last_hidden_state[0, 0])
            elif pooling == "avg":
                out.append(o.last_hidden_state[0].mean(0))
            else:
                out.append(((o.hidden_states[1] + o.hidden_states[-1]) / 2)[0].mean(0))
    return torch.stack(out).numpy()


@pytest.mark.data
@pytest.mark.parametrize("pooling", ["cls", "cls_before_pooler", "avg", "avg_first_last"])
def test_poolings_match_transformers(tiny_bert_dir, one_torch_thread, pooling):
    from hardmix.text.encoder import SentenceEncoder

    enc = SentenceEncoder(tiny_bert_dir, pooling=pooling, device="cpu", batch_size=3)
    emb = enc.encode(SENTENCES)
    assert emb.shape == (len(SENTENCES), 32) and emb.dtype == np.float32
    np.testing.assert_allclose(emb, _reference(tiny_bert_dir, SENTENCES, pooling), atol=2e-5)
    np.testing.assert_array_equal(emb[0], emb[4])


@pytest.mark.data
def test_cache_encodes_each_sentence_once(tiny_bert_dir, one_torch_thread, monkeypatch):
    from hardmix.text.encoder import SentenceEncoder

    enc = SentenceEncoder(tiny_bert_dir, pooling="avg", device="cpu")
    seen: list[int] = []
    forward = enc._forward
    monkeypatch.setattr(enc, "_forward", lambda feats: seen.append(len(feats)) or forward(feats))
    first = enc.encode(SENTENCES)
    assert sum(seen) == 4  # 4 distinct sentences
    again = enc.encode(list(reversed(SENTENCES)))
    assert sum(seen) == 4
    np.testing.assert_array_equal(again, first[::-1])
    short = enc.encode(SENTENCES[:1], max_length=4)  # another max length is another cache entry
    assert sum(seen) == 5 and not np.allclose(short[0], first[0])
    assert enc.encode([]).shape == (0, 32)


@pytest.mark.data
def test_folder_kinds(tiny_bert_dir, tmp_path, one_torch_thread):
    from hardmix.text.encoder import SentenceEncoder, inspect_model_folder

    assert inspect_model_folder(tiny_bert_dir)["kind"] == "huggingface"
    assert SentenceEncoder(tiny_bert_dir, device="cpu").pooling == "cls"  # plain HF: [CLS] by default

    export = tmp_path / "export"
    shutil.copytree(tiny_bert_dir, export)
    (export / "hardmix.json").write_text(json.dumps({"pooling": "avg_first_last", "max_length": 16}))
    enc = SentenceEncoder(export, device="cpu")
    assert (enc.info["kind"], enc.pooling, enc.max_length) == ("hardmix", "avg_first_last", 16)
    assert SentenceEncoder(export, pooling="cls", device="cpu").pooling == "cls"  # an explicit choice wins

    (export / "hardmix.json").write_text(json.dumps({"pooling": "max"}))
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        SentenceEncoder(export, device="cpu")
    with pytest.raises(FileNotFoundError, match="model folder"):
        SentenceEncoder(tmp_path / "missing")


@pytest.mark.data
def test_sentence_transformers_folder_matches_the_library(tiny_bert_dir, tmp_path, one_torch_thread):
    st = pytest.importorskip("sentence_transformers")
    import warnings

    from hardmix.text.encoder import SentenceEncoder

    with warnings.catch_warnings():  # sentence_transformers.models is deprecated (not removed) in v6
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import models
    transformer = models.Transformer(str(tiny_bert_dir), max_seq_length=64)
    pooling = models.Pooling(32, "mean")
    folder = tmp_path / "st"
    st.SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder))

    enc = SentenceEncoder(folder, device="cpu")
    assert (enc.info["kind"], enc.pooling, enc.info["normalize"]) == ("sentence-transformers", "avg", True)
    ours = enc.encode(SENTENCES)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    np.testing.assert_allclose(ours, theirs, atol=2e-5)

    # the classic layout (boolean pooling keys, sentence_bert_config.json) and an unsupported module
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 24}))
    enc = SentenceEncoder(folder, device="cpu")
    assert (enc.pooling, enc.max_length) == ("cls", 24)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="unsupported sentence-transformers module"):
        SentenceEncoder(folder, device="cpu")


@pytest.mark.data
def test_trainer_export_is_read_as_hardmix(tiny_bert_dir, tmp_path, one_torch_thread):
    """An export carries both hardmix.json and sentence-transformers files: hardmix.json decides."""
    from hardmix.text.encoder import SentenceEncoder

    export = tmp_path / "export"
    shutil.copytree(tiny_bert_dir, export)
    (export / "hardmix.json").write_text(json.dumps({"pooling": "cls_before_pooler"}))
    (export / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (export / "1_Pooling").mkdir()
    (export / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": True}))
    (export / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 40}))
    enc = SentenceEncoder(export, device="cpu")
    assert (enc.info["kind"], enc.pooling, enc.max_length) == ("hardmix", "cls_before_pooler", 40)


def test_eval_text_on_a_run_folder_or_a_non_model_folder_says_what_to_pass(tmp_path, capsys):
    from hardmix.cli import main

    vision_run = tmp_path / "vision_run"
    vision_run.mkdir()
    (vision_run / "checkpoint.pt").write_bytes(b"not loaded")
    text_run = tmp_path / "text_run"
    (text_run / "best").mkdir(parents=True)
    (text_run / "checkpoint.pt").write_bytes(b"not loaded")
    (text_run / "best" / "hardmix.json").write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, message in ((vision_run, "is it a vision run?"), (text_run, f"{text_run / 'best'}"),
                            (empty, "not a model folder (no config.json")):
        assert main(["eval", "text", str(folder), "--tasks", "sts"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and "sentencepiece" not in err[0], err
