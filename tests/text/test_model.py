"""The training model: dropout views, poolings, and the export round trip (transformers,
sentence-transformers and hardmix's own encoder give the same embeddings)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hardmix.text.model import ContrastiveSentenceModel, export_model, forward_views, load_backbone

SENTENCES = ["a man is playing a guitar .", "A woman slices an onion.", "the cat sat on the mat", "hi"]


def _model(path, pooling="cls", dropout=None, seed=0):
    torch.manual_seed(seed)
    backbone, tok = load_backbone(str(path), dropout=dropout)
    return ContrastiveSentenceModel(backbone, pooling, tok)


def _batch(model, sentences=SENTENCES):
    return dict(model.tokenizer(sentences, padding=True, return_tensors="pt"))


def test_two_views_get_different_dropout_masks(tiny_bert_dir, one_torch_thread):
    model = _model(tiny_bert_dir).train()
    batch = _batch(model)
    calls = []
    model.backbone.register_forward_hook(lambda m, i, o: calls.append(o.last_hidden_state.shape[0]))
    z1, z2 = forward_views(model, batch)
    assert calls == [2 * len(SENTENCES)]  # ONE forward pass over the duplicated batch
    assert z1.shape == z2.shape == (len(SENTENCES), 32)
    assert (z1 - z2).abs().amax(dim=1).min() > 1e-4  # every sentence's two copies differ
    # ... and only because of dropout: without it the copies are identical.
    nodrop = _model(tiny_bert_dir, dropout=0.0).train()
    a, b = forward_views(nodrop, batch)
    torch.testing.assert_close(a, b)


def test_cls_head_in_training_only(tiny_bert_dir, one_torch_thread):
    model = _model(tiny_bert_dir, "cls", dropout=0.0)
    assert model.mlp is not None and model.eval_pooling == "cls_before_pooler"
    batch = _batch(model)
    model.eval()
    with torch.no_grad():
        trained = model(**batch)
        bare = model(**batch, head=False)
        cls = model.backbone(**batch).last_hidden_state[:, 0]
    torch.testing.assert_close(bare, cls)
    torch.testing.assert_close(trained, torch.tanh(model.mlp.dense(cls)))
    emb = model.encode(SENTENCES)
    np.testing.assert_allclose(emb, cls.numpy(), atol=1e-5)
    assert _model(tiny_bert_dir, "avg").mlp is None


def test_encode_keeps_train_mode_and_draws_no_random_numbers(tiny_bert_dir, one_torch_thread):
    model = _model(tiny_bert_dir).train()
    state = torch.get_rng_state()
    a = model.encode(SENTENCES, batch_size=3)
    b = model.encode(list(reversed(SENTENCES)), batch_size=2)[::-1]
    assert model.training
    assert torch.equal(state, torch.get_rng_state())
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert a.dtype == np.float32


def test_encode_poolings_is_each_pooling_encoded_alone_from_one_pass(tiny_bert_dir, one_torch_thread):
    """One backbone pass per batch gives every pooling exactly what ``encode`` gives with it set, and
    each equals the pooling computed by hand from the backbone's token states."""
    model = _model(tiny_bert_dir, "cls", dropout=0.0)
    calls = []
    model.backbone.register_forward_hook(lambda m, i, o: calls.append(o.last_hidden_state.shape[0]))
    poolings = ("cls_before_pooler", "avg", "avg_first_last")
    both = model.encode_poolings(SENTENCES, poolings, batch_size=3)
    assert calls == [3, 1]  # 4 sentences, batches of 3: two passes for three poolings
    batch = _batch(model)
    with torch.no_grad():
        out = model.backbone(**batch, output_hidden_states=True)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    first_last = (out.hidden_states[1] + out.hidden_states[-1]) / 2
    by_hand = {"cls_before_pooler": out.last_hidden_state[:, 0],
               "avg": (out.last_hidden_state * mask).sum(1) / mask.sum(1),
               "avg_first_last": (first_last * mask).sum(1) / mask.sum(1)}
    for pooling in poolings:
        model.eval_pooling = pooling
        np.testing.assert_array_equal(both[pooling], model.encode(SENTENCES, batch_size=3))
        np.testing.assert_allclose(both[pooling], by_hand[pooling].numpy(), atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "avg"])
def test_export_round_trip(tmp_path, tiny_bert_dir, pooling, one_torch_thread):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from hardmix.text import encode
    from hardmix.text.encoder import SentenceEncoder

    model = _model(tiny_bert_dir, pooling)
    with torch.no_grad():  # move away from the saved init, so a stale load would show
        for p in model.backbone.parameters():
            p.add_(0.01 * torch.randn_like(p))
    out = export_model(model, tmp_path / "best", {"step": 5})
    meta = json.loads((out / "hardmix.json").read_text())
    assert meta["pooling"] == model.eval_pooling and meta["step"] == 5
    assert meta["base_model"] == str(tiny_bert_dir)  # the folder the weights came from
    card = (out / "README.md").read_text()
    assert f"base_model: {tiny_bert_dir}" in card and "library_name: sentence-transformers" in card
    ours = model.encode(SENTENCES)

    hf = AutoModel.from_pretrained(out).eval()
    for a, b in zip(hf.state_dict().values(), model.backbone.state_dict().values()):
        torch.testing.assert_close(a, b)

    st = SentenceTransformer(str(out), device="cpu")
    st_emb = st.encode(SENTENCES, convert_to_numpy=True, batch_size=2)
    np.testing.assert_allclose(st_emb, ours, atol=1e-5)
    enc = SentenceEncoder(out, batch_size=3)
    assert enc.pooling in (model.eval_pooling, "cls" if model.eval_pooling == "cls_before_pooler" else None)
    np.testing.assert_allclose(enc.encode(SENTENCES), ours, atol=1e-5)
    np.testing.assert_allclose(encode(str(out), SENTENCES, batch_size=2), ours, atol=1e-5)
    np.testing.assert_allclose(encode(model, SENTENCES), ours, atol=1e-6)

    export_model(model, tmp_path / "best")  # overwrite in place
    assert not (tmp_path / ".best.tmp").exists() and not (tmp_path / ".best.old").exists()


def test_avg_first_last_export_has_no_sentence_transformers_files(tmp_path, tiny_bert_dir, one_torch_thread):
    from hardmix.text.encoder import SentenceEncoder

    model = _model(tiny_bert_dir, "avg_first_last")
    out = export_model(model, tmp_path / "best")
    meta = json.loads((out / "hardmix.json").read_text())
    assert meta["sentence_transformers"] is False and "avg_first_last" in meta["sentence_transformers_note"]
    assert not (out / "modules.json").exists()
    np.testing.assert_allclose(SentenceEncoder(out).encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)
