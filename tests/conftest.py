"""Shared pytest fixtures. Each block is owned by one part of the project; keep blocks separate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# ---- data root (shared by all blocks) -------------------------------------------------------------
# Tests that need the shared data take the `data_root` fixture. Where HARDMIX_DATA is unset or missing
# they skip with a reason, except when HARDMIX_REQUIRE_DATA=1 (set by .ci/run when the data is present):
# then a missing data folder fails the test, so CI cannot pass by skipping.


def _require_data() -> bool:
    return os.environ.get("HARDMIX_REQUIRE_DATA", "") not in ("", "0")


def require_data_path(*parts: str) -> Path:
    """Return HARDMIX_DATA/parts..., or skip (fail under HARDMIX_REQUIRE_DATA=1) when it is absent."""
    root = os.environ.get("HARDMIX_DATA")
    path = Path(root).joinpath(*parts) if root else None
    if path is None or not path.exists():
        reason = (
            f"needs the shared data: HARDMIX_DATA={root!r} has no {'/'.join(parts) or 'folder'}"
            if root
            else "needs the shared data: HARDMIX_DATA is not set"
        )
        if _require_data():
            pytest.fail(reason + " (HARDMIX_REQUIRE_DATA=1)")
        pytest.skip(reason)
    return path


# No test reaches for the network: `hardmix train` and `hardmix compare` list missing data instead of
# fetching it (a download test unsets this and serves the files itself).
os.environ.setdefault("HARDMIX_OFFLINE", "1")

# The machine's cache folder (content digests, decoded images) is a fresh one for each pytest run, never the
# user's: a test that looks at the cache sets its own.
if not os.environ.get("HARDMIX_CACHE"):
    import tempfile

    os.environ["HARDMIX_CACHE"] = tempfile.mkdtemp(prefix="hardmix-test-cache-")


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The shared data folder (HARDMIX_DATA)."""
    return require_data_path()


@pytest.fixture(scope="session")
def bert_mini_path() -> Path:
    """The shared pretrained bert-mini folder (its tokenizer is the real bert-base-uncased WordPiece)."""
    return require_data_path("models", "bert-mini-wiki-mlm")
# ---- end data root ---------------------------------------------------------------------------------


# ---- text trainer ---------------------------------------------------------------------------------
# A random-init tiny BERT with the real bert-base-uncased WordPiece tokenizer of bert-mini-wiki-mlm, and a
# few hundred real sentences of the shared enwiki-100k corpus.


@pytest.fixture
def one_torch_thread():
    """Run the test on one intra-op thread (the shared CI box has 2 cores; oversubscribed OpenMP threads
    spin and make small models ~100x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, bert_mini_path) -> Path:
    """A Hugging Face folder: BertConfig(2 layers, hidden 32, 2 heads, ff 64), random init (seed 0), with
    the real tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(bert_mini_path)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def wiki_sentences() -> list[str]:
    """The first 600 sentences of the shared enwiki-100k corpus."""
    import gzip

    path = require_data_path("wiki", "enwiki-100k.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(600)]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory, wiki_sentences) -> Path:
    """A plain-text corpus of 400 real sentences."""
    path = tmp_path_factory.mktemp("corpus") / "wiki400.txt"
    path.write_text("".join(s + "\n" for s in wiki_sentences[:400]), encoding="utf-8")
    return path


@pytest.fixture
def tiny_text_config(tiny_bert_dir, tiny_corpus) -> dict:
    """A config dict for a short CPU run of the text trainer on the tiny model (no evaluation)."""
    return {
        "model": {"name_or_path": str(tiny_bert_dir), "pooling": "cls"},
        "data": {"train_file": str(tiny_corpus), "max_length": 32},
        "loss": {"temperature": 0.05, "strategies": [{"name": "none"}]},
        "train": {"batch_size": 16, "lr": 1e-3, "max_steps": 10, "device": "cpu", "seed": 1, "save_steps": 0,
                  "precision": "fp32"},  # float32 on every machine (auto is bf16 where the CPU computes it)
        "eval": {"eval_steps": 0, "at_end": False},
        "log": {"log_steps": 1, "progress": False},
    }
# ---- end text trainer ------------------------------------------------------------------------------


# ---- text evaluation ------------------------------------------------------------------------------
# The SentEval data folder, and a cheap deterministic stand-in encoder for protocol tests.


@pytest.fixture(scope="session")
def senteval_root() -> Path:
    """The shared SentEval data folder (HARDMIX_DATA/senteval)."""
    return require_data_path("senteval")


@pytest.fixture(scope="session")
def bow_encoder():
    """A fast deterministic encoder: the mean of fixed random 64-d vectors of a sentence's words (a zero
    vector for an empty sentence). Returns a callable ``list[str] -> (n, 64) float32``."""
    import zlib

    import numpy as np

    dim = 64

    def word_vec(w: str) -> np.ndarray:
        return np.random.default_rng(zlib.crc32(w.encode("utf-8"))).standard_normal(dim)

    cache: dict[str, np.ndarray] = {}

    def vec(w: str) -> np.ndarray:
        if w not in cache:
            cache[w] = word_vec(w)
        return cache[w]

    def encode(sentences: list[str]) -> np.ndarray:
        out = np.zeros((len(sentences), dim), dtype=np.float32)
        for i, s in enumerate(sentences):
            words = s.split()
            if words:
                out[i] = np.mean([vec(w) for w in words], axis=0)
        return out

    return encode
# ---- end text evaluation ---------------------------------------------------------------------------


# ---- vision trainer -------------------------------------------------------------------------------
# Small ImageFolder trees of real CIFAR-10 images (symlinks into the shared data) and a config dict for a
# tiny ResNet (ResNet-10 layout, width 8, small stem) that trains in seconds on one CPU thread.


def _vision_tree(root: Path, per_class_train: int, per_class_test: int, copy: bool = False) -> Path:
    """Link (or, for a tree a test damages, copy) the first images of each class of the shared CIFAR-10."""
    import shutil

    src = require_data_path("images", "cifar10")
    classes = (src / "classes.txt").read_text().split()
    for split, n in (("train", per_class_train), ("test", per_class_test)):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for f in sorted((src / split / c).iterdir())[:n]:
                if copy:
                    shutil.copyfile(f, d / f.name)  # writing to it never reaches the shared data
                else:
                    (d / f.name).symlink_to(f)
    return root


@pytest.fixture(scope="session")
def cifar_tree(tmp_path_factory) -> Path:
    """An ImageFolder root with train/ (32 real CIFAR-10 images per class) and test/ (10 per class)."""
    return _vision_tree(tmp_path_factory.mktemp("cifar-small"), 32, 10)


@pytest.fixture
def vision_tree_factory(tmp_path):
    """Build a fresh small CIFAR-10 ImageFolder tree (to damage in a test): ``factory(train, test)``."""
    return lambda per_class_train=4, per_class_test=2: _vision_tree(tmp_path / "tree", per_class_train,
                                                                    per_class_test, copy=True)


@pytest.fixture
def vision_one_thread():
    """One torch thread for the test (2 shared cores: small kernels spin on oversubscribed threads)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_vision_config_dict(dataset: Path, cache_dir: Path, **sections: dict) -> dict:
    """A config for a short CPU run: 320 images, batch 32, queue 96, tiny ResNet; ``sections`` update it."""
    cfg = {
        "data": {"dataset": str(dataset), "cache_dir": str(cache_dir), "num_workers": 2},
        "augment": {"crop_size": 32, "mean": [0.4914, 0.4822, 0.4465], "std": [0.247, 0.243, 0.261]},
        "model": {"backbone": "resnet10", "width": 8, "small_stem": True, "proj_hidden": 64, "proj_dim": 32,
                  "momentum": 0.99, "bn_splits": 2},
        "loss": {"temperature": 0.2, "strategies": "none", "queue_size": 96},
        "train": {"epochs": 2, "batch_size": 32, "lr": 0.3, "device": "cpu", "threads": 1, "save_steps": 10,
                  "precision": "fp32"},  # float32 on every machine (auto is bf16 where the CPU computes it)
        "eval": {"at_end": False, "knn_k": 20},
        "log": {"log_steps": 1, "progress": False},
    }
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


@pytest.fixture(scope="session")
def tiny_vision_config(cifar_tree, tmp_path_factory):
    """``factory(**sections) -> dict``: :func:`tiny_vision_config_dict` on ``cifar_tree``."""
    cache = tmp_path_factory.getbasetemp() / "vision-cache"
    return lambda **sections: tiny_vision_config_dict(cifar_tree, cache, **sections)
# ---- end vision trainer ----------------------------------------------------------------------------
