"""A frozen sentence encoder for evaluation: a transformers model plus a pooling, with an embedding cache.

Three kinds of model folder are accepted:

- a **hardmix export**: a Hugging Face folder with a ``hardmix.json`` file ``{"pooling": ...}`` (optionally
  ``"max_length"``); its pooling is the default. ``hardmix.json`` wins over the sentence-transformers
  files that an export also carries;
- a **sentence-transformers folder** (``modules.json``): the transformer is loaded from the folder named by
  its Transformer module, the pooling from ``<Pooling module>/config.json`` (``cls`` or ``mean``; both the
  old boolean keys and the newer ``"pooling_mode"`` key are read), and a Normalize module, if any, is
  applied; other modules (Dense, ...) are refused;
- any other **Hugging Face folder** (``AutoModel`` + ``AutoTokenizer``), with ``cls`` pooling by default.

Poolings (:mod:`hardmix.text.pooling`, shared with the trainer; averages are over non-padding tokens):

- ``cls`` and ``cls_before_pooler``: the last layer's [CLS] vector. Both mean the same here: the
  model's own pooler (BERT's dense+tanh, untrained in an MLM-only checkpoint such as bert-mini-wiki-mlm) is
  never applied, and a trainer's MLP head is not part of an export. (SimCSE's ``evaluation.py`` maps ``cls``
  to the pooler output; hardmix deliberately does not.)
- ``avg``: the average of the last layer;
- ``avg_first_last``: the average of (first Transformer layer + last layer) / 2, the first layer being
  ``hidden_states[1]`` as in SimCSE's ``evaluation.py``.

Encoding is done once per distinct sentence (a cache keyed by sentence and max length), in batches sorted by
token length, in eval mode under :func:`torch.inference_mode`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from hardmix.text.model import model_folder_errors, pretrained_model, quiet_transformers
from hardmix.text.pooling import POOLINGS, pool
from hardmix.training.run_folder import BEST, CHECKPOINT

_ST_POOLING = {"cls": "cls", "mean": "avg"}  # sentence-transformers pooling mode -> ours


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None


def _st_pooling(config: dict, path: Path) -> str:
    """Our pooling name for a sentence-transformers Pooling config (old boolean or new string keys)."""
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [k[len("pooling_mode_"):].removesuffix("_token").removesuffix("_tokens")
                 for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    if len(modes) != 1 or modes[0] not in _ST_POOLING:
        raise ValueError(f"{path}: unsupported sentence-transformers pooling {modes}; supported: cls, mean")
    return _ST_POOLING[modes[0]]


def inspect_model_folder(path: str | os.PathLike[str]) -> dict:
    """Describe a model folder without loading the weights.

    Returns:
        ``{"kind": "hardmix" | "sentence-transformers" | "huggingface", "transformer": Path,
        "pooling": str | None, "max_length": int | None, "normalize": bool, "lowercase": bool}``.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: model folder not found")
    if (root / CHECKPOINT).is_file() and not (root / "config.json").is_file():
        # A run folder of the training engine: its model is RUN/best (text), or it is not a text model.
        if (root / BEST / "hardmix.json").is_file():
            raise ValueError(f"{root}: a training run folder; its sentence encoder is {root / BEST}")
        raise ValueError(f"{root}: a training run folder without a text model (best/): is it a vision run? "
                         "(a vision run encodes images: hardmix encode RUN --images FOLDER); sentences "
                         "take a sentence encoder folder (a hardmix export RUN/best, a Hugging Face or a "
                         "sentence-transformers folder)")
    if not (root / "config.json").is_file() and not (root / "modules.json").is_file():
        raise ValueError(f"{root}: not a model folder (no config.json or modules.json): pass a hardmix "
                         "export (RUN/best), a Hugging Face or a sentence-transformers folder")
    info: dict = {"kind": "huggingface", "transformer": root, "pooling": None, "max_length": None,
                  "normalize": False, "lowercase": False}
    if (root / "hardmix.json").is_file():
        info["kind"] = "hardmix"
        meta = _read_json(root / "hardmix.json")
        info["pooling"] = meta.get("pooling")
        if meta.get("max_length"):
            info["max_length"] = int(meta["max_length"])
        elif (root / "sentence_bert_config.json").is_file():
            info["max_length"] = _read_json(root / "sentence_bert_config.json").get("max_seq_length")
    elif (root / "modules.json").is_file():
        info["kind"] = "sentence-transformers"
        modules = _read_json(root / "modules.json")
        transformer = pooling_dir = None
        for m in modules:
            kind = str(m.get("type", "")).rsplit(".", 1)[-1]
            if kind == "Transformer":
                transformer = root / m.get("path", "")
            elif kind == "Pooling":
                pooling_dir = root / m["path"]
            elif kind == "Normalize":
                info["normalize"] = True
            else:
                raise ValueError(f"{root / 'modules.json'}: unsupported sentence-transformers module "
                                 f"{m.get('type')!r} (supported: Transformer, Pooling, Normalize)")
        if transformer is None or pooling_dir is None:
            raise ValueError(f"{root / 'modules.json'}: needs a Transformer and a Pooling module")
        info["transformer"] = transformer
        info["pooling"] = _st_pooling(_read_json(pooling_dir / "config.json"), pooling_dir / "config.json")
        for cfg_dir in dict.fromkeys([transformer, root]):
            cfg = cfg_dir / "sentence_bert_config.json"
            if cfg.is_file():
                st_cfg = _read_json(cfg)
                if st_cfg.get("max_seq_length"):
                    info["max_length"] = int(st_cfg["max_seq_length"])
                info["lowercase"] = bool(st_cfg.get("do_lower_case", False))
                break
    if info["pooling"] is not None and info["pooling"] not in POOLINGS:
        raise ValueError(f"{root}: unknown pooling {info['pooling']!r}; expected one of {POOLINGS}")
    return info


class SentenceEncoder:
    """A frozen transformers encoder with a pooling, mapping sentences to float32 embeddings.

    Args:
        model: a hardmix export, a sentence-transformers folder or a Hugging Face folder.
        pooling: one of :data:`POOLINGS`; default: the folder's own (hardmix.json or sentence-transformers
            pooling), else ``cls``.
        max_length: truncation length in tokens; default: the folder's own (hardmix.json,
            sentence-transformers ``max_seq_length`` or the tokenizer's ``model_max_length``), capped at
            the model's position embeddings.
        batch_size: sentences per forward pass.
        device: torch device; default CUDA when available, else CPU.
        cache: keep the embedding of every sentence encoded (each sentence is encoded once).

    Example:
        >>> enc = SentenceEncoder("models/bert-mini-wiki-mlm", pooling="avg")  # doctest: +SKIP
        >>> enc.encode(["a man is playing a guitar ."]).shape  # doctest: +SKIP
        (1, 256)
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        pooling: str | None = None,
        max_length: int | None = None,
        batch_size: int = 128,
        device: str | torch.device | None = None,
        cache: bool = True,
    ) -> None:
        from transformers import AutoTokenizer

        self.info = inspect_model_folder(model)
        self.path = Path(model)
        self.pooling = pooling or self.info["pooling"] or "cls"
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {POOLINGS}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        path = self.info["transformer"]
        with model_folder_errors(model), quiet_transformers():
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = pretrained_model(path).to(self.device).eval()
        limit = getattr(self.model.config, "max_position_embeddings", None) or 512
        if getattr(self.model.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
            limit -= 2  # RoBERTa positions start after the padding index
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        default = self.info["max_length"] or (tok_max if tok_max and tok_max < 100_000 else limit)
        self._limit = int(limit)
        self.max_length = int(min(max_length or default, limit))
        self.batch_size = batch_size
        self.use_cache = cache
        self._cache: dict[tuple[int, str], np.ndarray] = {}

    def __repr__(self) -> str:
        return (f"SentenceEncoder({str(self.path)!r}, kind={self.info['kind']}, pooling={self.pooling}, "
                f"max_length={self.max_length}, device={self.device})")

    @property
    def dim(self) -> int:
        """Embedding size d."""
        return int(self.model.config.hidden_size)

    def clear_cache(self) -> None:
        """Forget every cached embedding."""
        self._cache.clear()

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        """Same as :meth:`encode` with the default settings."""
        return self.encode(sentences)

    @torch.inference_mode()
    def _forward(self, features: list[dict]) -> np.ndarray:
        """Encode one batch of tokenized sentences to (b, d) float32."""
        batch = self.tokenizer.pad(features, padding=True, return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items()}
        out = self.model(**batch, output_hidden_states=self.pooling == "avg_first_last", return_dict=True)
        emb = pool(out.last_hidden_state, batch["attention_mask"], self.pooling, out.hidden_states).float()
        if self.info["normalize"]:
            emb = torch.nn.functional.normalize(emb, dim=-1)
        return emb.cpu().numpy()

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int | None = None,
        max_length: int | None = None,
        show_progress: bool = False,
        desc: str = "encode",
        progress: Any = None,
    ) -> np.ndarray:
        """Embed ``sentences``; sentences already in the cache are not encoded again.

        Args:
            sentences: n sentences.
            batch_size: sentences per forward pass (default: the encoder's).
            max_length: truncation length in tokens (default: the encoder's).
            show_progress: show a progress bar over the sentences still to encode.
            desc: the progress bar's label.
            progress: an existing progress bar to advance by the sentences encoded (instead of a new one).

        Returns:
            (n, d) float32 embeddings, in the order of ``sentences``.
        """
        batch_size = batch_size or self.batch_size
        max_length = int(min(max_length or self.max_length, self._limit))
        sentences = list(sentences)
        cache = self._cache if self.use_cache else {}
        todo = list(dict.fromkeys(s for s in sentences if (max_length, s) not in cache))
        if todo:
            texts = [s.strip().lower() for s in todo] if self.info["lowercase"] else todo
            ids = self.tokenizer(texts, truncation=True, max_length=max_length)
            features = [{k: ids[k][i] for k in ids.keys()} for i in range(len(todo))]
            order = sorted(range(len(todo)), key=lambda i: len(features[i]["input_ids"]))
            bar = progress or tqdm(total=len(todo), desc=desc, unit="sent", disable=not show_progress,
                                   file=sys.stderr, dynamic_ncols=True)
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                emb = self._forward([features[i] for i in idx])
                for row, i in enumerate(idx):
                    cache[(max_length, todo[i])] = emb[row]
                bar.update(len(idx))
            if progress is None:
                bar.close()
        if not sentences:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([cache[(max_length, s)] for s in sentences]).astype(np.float32, copy=False)
