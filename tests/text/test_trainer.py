"""Short real runs of the text trainer: a tiny random-init BERT with the real tokenizer, real sentences."""

from __future__ import annotations

import copy
import json
import sys
import types

import numpy as np
import pytest
import torch

from hardmix.cli import main
from hardmix.config.loader import ConfigError
from hardmix.strategies import MixCSE
from hardmix.text.config import build_text_config
from hardmix.text.data import CorpusError
from hardmix.text.model_source import ModelNotFoundError
from hardmix.text.task import TextTask
from hardmix.training import RunFolderError, run_training


def train(cfg, output, resume: bool = False) -> dict:
    return run_training(TextTask, cfg, output, resume)


def _cfg(base: dict, **sections) -> object:
    data = copy.deepcopy(base)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return build_text_config(data)


def _losses(run_dir) -> list[float]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if "loss" in x]


@pytest.fixture
def stsb_dev(monkeypatch, data_root):
    """``hardmix.text.evaluation.stsb_dev_score``; until that module exists, the same score computed here
    (Spearman x 100 of cosine similarity on STS-B dev)."""
    try:
        from hardmix.text.evaluation import stsb_dev_score
    except ImportError:
        from hardmix.text.senteval_data import load_stsb
        from hardmix.text.sts import score_pairs

        pairs = load_stsb("dev")

        def stsb_dev_score(encode_fn):
            return 100.0 * score_pairs(encode_fn, pairs)

        module = types.ModuleType("hardmix.text.evaluation")
        module.stsb_dev_score = stsb_dev_score
        monkeypatch.setitem(sys.modules, "hardmix.text.evaluation", module)
    return stsb_dev_score


def test_loss_falls(tmp_path, tiny_text_config, one_torch_thread):
    cfg = _cfg(tiny_text_config, train={"max_steps": 25},
               loss={"strategies": [{"name": "mixcse", "lam": 0.2}]})
    results = train(cfg, tmp_path / "run")
    losses = _losses(tmp_path / "run")
    assert len(losses) == 25 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3, losses
    assert results["finished"] and results["steps"] == 25
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    for key in ("lr", "pos_sim", "neg_sim", "alignment", "uniformity", "anchor_grad_norm",
                "mixcse/synthetic_sim"):
        assert key in record
    assert (tmp_path / "run" / "best" / "hardmix.json").is_file()  # no evaluation: the last model
    assert json.loads((tmp_path / "run" / "results.json").read_text())["best_score"] is None


@pytest.mark.parametrize("strategies, queue", [
    ([{"name": "mixcse", "lam": 0.2}], 0),
    ([{"name": "mochi", "n_hard": 16, "n_pair": 8, "n_query": 4, "warmup_steps": 2}], 32),
])
def test_resume_equals_an_uninterrupted_run(tmp_path, tiny_text_config, strategies, queue, one_torch_thread):
    sections = dict(train={"max_steps": 12, "save_steps": 4},
                    loss={"strategies": strategies, "queue_size": queue})
    train(_cfg(tiny_text_config, **sections), tmp_path / "full")
    stopped = copy.deepcopy(sections)
    stopped["train"] = {**sections["train"], "stop_after_steps": 6}
    part = train(_cfg(tiny_text_config, **stopped), tmp_path / "split")
    assert not part["finished"] and part["steps"] == 6
    with pytest.raises(RunFolderError, match="--resume"):
        train(_cfg(tiny_text_config, **sections), tmp_path / "split")
    with pytest.raises(ConfigError, match="train.lr"):
        changed = {**sections, "train": {**sections["train"], "lr": 1.0}}
        train(_cfg(tiny_text_config, **changed), tmp_path / "split", resume=True)
    done = train(_cfg(tiny_text_config, **sections), tmp_path / "split", resume=True)
    assert done["finished"] and done["steps"] == 12
    full, split = _losses(tmp_path / "full"), _losses(tmp_path / "split")
    assert len(full) == 12
    assert split == full  # exactly, step for step
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=True)["model"]
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_evaluation_does_not_change_the_run(tmp_path, tiny_text_config, stsb_dev, one_torch_thread):
    base = dict(train={"max_steps": 8})
    train(_cfg(tiny_text_config, **base), tmp_path / "noeval")
    results = train(_cfg(tiny_text_config, **base, eval={"eval_steps": 3, "at_end": True}), tmp_path / "eval")
    assert _losses(tmp_path / "eval") == _losses(tmp_path / "noeval")
    lines = [json.loads(x) for x in (tmp_path / "eval" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if "stsb_dev" in x]
    assert [x["step"] for x in evals] == [3, 6, 8]
    best = max(evals, key=lambda x: x["stsb_dev"])
    assert results["best_score"] == pytest.approx(best["stsb_dev"])
    assert results["final_scores"]["stsb_dev"] == pytest.approx(best["stsb_dev"])
    assert results["best_step"] == best["step"]
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["best_step"] == best["step"]
    # The export is the best model: scoring it again gives the best score.
    from hardmix.text import encode

    exported = stsb_dev(lambda s: encode(tmp_path / "eval" / "best", s, batch_size=128))
    assert exported == pytest.approx(best["stsb_dev"], abs=1e-3)


def test_setup_errors_come_before_training(tmp_path, tiny_text_config, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no-such-corpus"):
        missing = str(tmp_path / "no-such-corpus.txt")
        train(_cfg(tiny_text_config, data={"train_file": missing}), tmp_path / "a")
    assert not (tmp_path / "a").exists()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(CorpusError, match="no sentences"):
        train(_cfg(tiny_text_config, data={"train_file": str(empty)}), tmp_path / "b")
    assert not (tmp_path / "b" / "metrics.jsonl").exists()
    with pytest.raises(ModelNotFoundError, match="not a model folder"):
        train(_cfg(tiny_text_config, model={"name_or_path": str(tmp_path / "nomodel")}), tmp_path / "c")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="offline"):
        train(_cfg(tiny_text_config, model={"name_or_path": "hardmix-test/no-such-model"}), tmp_path / "d")
    # --resume where no run started (a requeued job that always passes it) starts from step 0
    assert train(_cfg(tiny_text_config, train={"max_steps": 1}), tmp_path / "e", resume=True)["finished"]
    with pytest.raises(ConfigError, match="train.precision"):
        train(_cfg(tiny_text_config, train={"precision": "fp16", "device": "cpu"}), tmp_path / "f")


def test_cli_with_overrides(tmp_path, tiny_text_config, capsys, one_torch_thread):
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_text_config))
    out = tmp_path / "run"
    assert main(["train", "text", str(path), "--set", "train.max_steps=3", "--set", "train.seed=9",
                 "--set", "loss.strategies=[{name: mixcse, lam: 0.3, second_direction: false}]",
                 "--output", str(out)]) == 0
    assert "model: " in capsys.readouterr().out
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["train"]["max_steps"] == 3 and saved["train"]["seed"] == 9
    assert saved["loss"]["strategies"] == [MixCSE(lam=0.3, second_direction=False).config()]
    assert len(_losses(out)) == 3
    assert main(["train", "text", str(path), "--set", "loss.strategies=[{name: mixcse, lam: 0}]",
                 "--output", str(tmp_path / "bad")]) == 2
    assert "loss.strategies[0].lam" in capsys.readouterr().err


def test_encode_cli(tmp_path, tiny_text_config, monkeypatch, capsysbinary, one_torch_thread):
    import io

    train(_cfg(tiny_text_config, train={"max_steps": 2}), tmp_path / "run")
    sentences = ["a man is playing a guitar .", "", "ünïcode works"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(sentences).encode() + b"\n")))
    assert main(["encode", str(tmp_path / "run" / "best"), "--batch-size", "2"]) == 0
    arr = np.load(io.BytesIO(capsysbinary.readouterr().out))
    from hardmix.text import encode

    assert arr.shape == (3, 32) and arr.dtype == np.float32
    np.testing.assert_allclose(arr, encode(tmp_path / "run" / "best", sentences), atol=1e-5)


def test_encode_cli_row_i_is_line_i(tmp_path, tiny_text_config, monkeypatch, capsysbinary, one_torch_thread):
    """A lone carriage return inside a line is part of that line's sentence: ``printf 'a\rb\nc\r\n'`` gives
    2 rows (universal newlines made it 3, shifting every row after it); a CRLF ending is a line ending."""
    import io

    from hardmix.text import encode

    train(_cfg(tiny_text_config, train={"max_steps": 1}), tmp_path / "run")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a man\rsings .\nc\r\n")))
    assert main(["encode", str(tmp_path / "run" / "best")]) == 0
    arr = np.load(io.BytesIO(capsysbinary.readouterr().out))
    assert arr.shape[0] == 2
    np.testing.assert_allclose(arr, encode(tmp_path / "run" / "best", ["a man\rsings .", "c"]), atol=1e-5)


def test_resume_after_a_crash(tmp_path, tiny_text_config, monkeypatch, one_torch_thread):
    """A run killed between checkpoints resumes from the last one; metrics logged after it are rewritten."""
    sections = dict(train={"max_steps": 9, "save_steps": 3})
    train(_cfg(tiny_text_config, **sections), tmp_path / "full")

    original = TextTask.train_step

    def crash_at_step_5(self, batch, step):
        if step == 5:
            raise KeyboardInterrupt("simulated crash")
        return original(self, batch, step)

    monkeypatch.setattr(TextTask, "train_step", crash_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        train(_cfg(tiny_text_config, **sections), tmp_path / "crashed")
    assert len(_losses(tmp_path / "crashed")) == 5  # steps 4 and 5 were logged after the step-3 checkpoint
    monkeypatch.setattr(TextTask, "train_step", original)
    train(_cfg(tiny_text_config, **sections), tmp_path / "crashed", resume=True)
    assert _losses(tmp_path / "crashed") == _losses(tmp_path / "full")


def test_other_architectures_and_tensorboard(tmp_path, tiny_text_config, tiny_bert_dir, one_torch_thread):
    """Any AutoModel: a tiny random-init RoBERTa-architecture encoder trains and exports (here with the
    WordPiece tokenizer; the trainer passes only the inputs the tokenizer declares), with TensorBoard
    events beside metrics.jsonl."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tok.model_input_names = ["input_ids", "attention_mask"]
    config = RobertaConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=130,
                           pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(tmp_path / "roberta")
    tok.save_pretrained(tmp_path / "roberta")
    cfg = _cfg(tiny_text_config, model={"name_or_path": str(tmp_path / "roberta"), "pooling": "avg"},
               train={"max_steps": 3}, log={"tensorboard": True})
    results = train(cfg, tmp_path / "run")
    assert results["finished"] and len(_losses(tmp_path / "run")) == 3
    meta = json.loads((tmp_path / "run" / "best" / "hardmix.json").read_text())
    assert meta["pooling"] == "avg"
    from hardmix.text import encode

    assert encode(tmp_path / "run" / "best", ["a test ."]).shape == (1, 32)
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
