"""hardmix's losses inside sentence-transformers: SentenceTransformerTrainer trains bert-mini with
MixCSELoss / HardMixLoss, and every loss it optimizes equals hardmix's own on the same embeddings."""

from __future__ import annotations

import gzip

import pytest
import torch

from hardmix.losses import ContrastiveLoss, mixcse_loss

st = pytest.importorskip("sentence_transformers")
datasets = pytest.importorskip("datasets")


@pytest.fixture
def sentences(data_root):
    with gzip.open(data_root / "wiki" / "enwiki-100k.txt.gz", "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(24)]


def _train(model, loss, sentences, tmp_path, steps=3):
    """Run SentenceTransformerTrainer, recording each step's two embedding batches and the loss it used."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    seen: list[torch.Tensor] = []
    rng: list[torch.Tensor] = []
    records: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    h1 = model.register_forward_hook(lambda m, i, out: seen.append(out["sentence_embedding"]))

    def on_loss(module, inputs, out):
        records.append((seen[-2].detach().clone(), seen[-1].detach().clone(), out.detach().clone(), rng[-1]))

    h2 = loss.register_forward_hook(on_loss)
    h3 = model.register_forward_hook(lambda m, i, out: rng.append(torch.get_rng_state()))  # after each pass
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "st"), max_steps=steps, per_device_train_batch_size=8, learning_rate=1e-4,
        warmup_steps=0, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, seed=0,
        dataloader_num_workers=0, disable_tqdm=True,
    )
    data = datasets.Dataset.from_dict({"anchor": sentences, "positive": sentences})
    try:
        SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
    finally:
        h1.remove()
        h2.remove()
        h3.remove()
    return records


def test_mixcse_loss_trains_bert_mini_with_the_sentence_transformers_trainer(
        bert_mini_path, sentences, tmp_path, one_torch_thread):
    from sentence_transformers import SentenceTransformer

    from hardmix.text.losses import MixCSELoss

    torch.manual_seed(0)
    model = SentenceTransformer(str(bert_mini_path), device="cpu")
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss = MixCSELoss(model, lam=0.2, temperature=0.05)
    records = _train(model, loss, sentences, tmp_path)
    assert len(records) == 3
    for z1, z2, value, _ in records:
        assert z1.shape == (8, 256) and not torch.allclose(z1, z2)  # two dropout views of the same sentences
        expected = mixcse_loss(z1, z2, lam=0.2, temperature=0.05)
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
        assert value > mixcse_loss(z1, z2, lam=None, temperature=0.05)  # the mixed negatives add to it
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert any("encoder.layer.3" in k for k in changed)  # the trainer stepped the optimizer
    assert loss.steps == 3 and "mixcse/synthetic_sim" in "".join(loss.last_output.stats())
    assert loss.get_config_dict()["strategies"]["lam"] == 0.2 and "Mixing Negatives" in loss.citation


def test_hardmix_loss_with_composed_strategies_equals_the_core(bert_mini_path, sentences, tmp_path,
                                                                one_torch_thread):
    from sentence_transformers import SentenceTransformer

    from hardmix.text.losses import HardMixLoss

    torch.manual_seed(0)
    model = SentenceTransformer(str(bert_mini_path), device="cpu")
    spec = [{"name": "mixcse", "lam": 0.3}, {"name": "mochi", "n_hard": 4, "n_pair": 4, "n_query": 2}]
    loss = HardMixLoss(model, strategies=spec, temperature=0.1)
    records = _train(model, loss, sentences, tmp_path, steps=2)
    core = ContrastiveLoss(0.1, spec)
    for step, (z1, z2, value, rng_state) in enumerate(records):
        torch.set_rng_state(rng_state)  # MoCHi draws its mixing weights from the global generator
        expected = core.in_batch(z1, z2, step=step).loss
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"HardMixLoss: takes \(anchor, positive\) pairs, 2 columns; .* 3"):
        loss([{}, {}, {}])


def test_the_documented_example_trains(bert_mini_path, tmp_path, monkeypatch, one_torch_thread):
    """docs/training.md's sentence-transformers example as written, the shared bert-mini for the Hub's."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "MixCSELoss" in b]
    assert "google/bert_uncased_L-4_H-256_A-4" in block
    monkeypatch.chdir(tmp_path)  # the trainer's default output folder
    monkeypatch.setenv("WANDB_DISABLED", "true")
    namespace: dict[str, object] = {}
    exec(block.replace("google/bert_uncased_L-4_H-256_A-4", str(bert_mini_path)), namespace)  # noqa: S102
    assert namespace["loss"].steps > 0 and torch.isfinite(namespace["loss"].last_output.loss)


def test_a_last_batch_of_one_pair_contributes_no_loss(bert_mini_path, sentences, tmp_path, one_torch_thread):
    """9 pairs at batch 8: the epoch's second batch holds one pair, which has no in-batch negative. It adds
    no loss (as MultipleNegativesRankingLoss's cross-entropy over one column) instead of stopping the
    trainer, and a zero that still back-propagates."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args

    from hardmix.text.losses import MixCSELoss

    torch.manual_seed(0)
    model = SentenceTransformer(str(bert_mini_path), device="cpu")
    loss = MixCSELoss(model, lam=0.2, temperature=0.05)
    values: list[torch.Tensor] = []
    hook = loss.register_forward_hook(lambda m, i, out: values.append(out.detach().clone()))
    args = Args(output_dir=str(tmp_path / "st"), num_train_epochs=1, per_device_train_batch_size=8,
                learning_rate=1e-4, warmup_steps=0, save_strategy="no", report_to="none", use_cpu=True,
                seed=0, dataloader_num_workers=0, disable_tqdm=True)
    data = datasets.Dataset.from_dict({"anchor": sentences[:9], "positive": sentences[:9]})
    try:
        SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss).train()
    finally:
        hook.remove()
    assert len(values) == 2 and float(values[0]) > 0.0 and float(values[1]) == 0.0
    assert loss.steps == 1  # the strategies' schedules count the steps that had a loss
    one = [torch.randn(1, 16, requires_grad=True), torch.randn(1, 16, requires_grad=True)]
    zero = loss.compute_loss_from_embeddings(one)
    zero.backward()
    assert float(zero) == 0.0 and torch.equal(one[0].grad, torch.zeros(1, 16))


def test_schedules_count_optimizer_steps_and_continue_on_the_trainer_s_resume(bert_mini_path, sentences,
                                                                              tmp_path, one_torch_thread):
    """The losses' schedules counted forward calls, which gradient accumulation
    multiplies, and restarted at 0 when the trainer resumed. With ``loss.callback()`` they count the
    trainer's optimizer steps (``global_step``), restored by a resumed trainer."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args

    from hardmix.text.losses import MixCSELoss

    def run(max_steps, resume=None):
        torch.manual_seed(0)
        model = SentenceTransformer(str(bert_mini_path), device="cpu")
        loss = MixCSELoss(model, lam={"start": 0.1, "end": 0.3, "steps": 4}, temperature=0.05)
        seen: list[int] = []
        hook = loss.register_forward_pre_hook(lambda m, i: seen.append(loss.steps))
        args = Args(output_dir=str(tmp_path / "st"), max_steps=max_steps, per_device_train_batch_size=4,
                    gradient_accumulation_steps=2, learning_rate=1e-4, warmup_steps=0, save_strategy="steps",
                    save_steps=2, report_to="none", use_cpu=True, seed=0, dataloader_num_workers=0,
                    disable_tqdm=True)
        data = datasets.Dataset.from_dict({"anchor": sentences, "positive": sentences})
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
        trainer.add_callback(loss.callback())
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            hook.remove()
        return seen

    assert run(3) == [0, 0, 1, 1, 2, 2]  # two forward calls a step, one count
    assert run(3, resume=str(tmp_path / "st" / "checkpoint-2")) == [2, 2]  # continued from the trainer
    # without the callback a scheduled loss counts forward calls, and says so once
    model = SentenceTransformer(str(bert_mini_path), device="cpu")
    loss = MixCSELoss(model, lam={"start": 0.1, "end": 0.3, "steps": 4}, temperature=0.05)
    z = [torch.randn(4, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)]
    with pytest.warns(UserWarning, match=r"add trainer\.add_callback\(loss\.callback\(\)\)"):
        loss.compute_loss_from_embeddings(z)
    loss.compute_loss_from_embeddings(z)
    assert loss.steps == 2
