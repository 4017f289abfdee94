"""The model that ``hardmix train text`` trains: a transformers backbone, a pooling and SimCSE's MLP head.

- Two views by dropout (SimCSE, Gao et al. 2021, Sec. 3): :meth:`ContrastiveSentenceModel.forward_views`
  duplicates every sentence of the batch, runs ONE forward pass in train mode over the 2B rows and splits
  the pooled output into z1 and z2; the two copies of a sentence get independent dropout masks.
- ``cls`` pooling puts SimCSE's MLP (Linear D->D, tanh; ``MLPLayer`` in SimCSE's ``models.py``) on [CLS]
  in training only; evaluation and export use the bare [CLS] (SimCSE's ``--mlp_only_train``, the
  unsupervised recipe that MixCSE also follows). The other poolings have no head.
- Export (:func:`export_model`): a Hugging Face folder (``save_pretrained`` and the tokenizer), a
  ``hardmix.json`` ``{"pooling": <evaluation pooling>}`` for hardmix's own encoder, and the
  sentence-transformers files (``modules.json``, ``sentence_bert_config.json``, ``1_Pooling/config.json``)
  so ``SentenceTransformer(folder)`` gives the same embeddings. ``avg_first_last`` has no
  sentence-transformers pooling: its export carries no sentence-transformers files and says so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from hardmix.text.pooling import check_pooling, needs_hidden_states, pool
from hardmix.training.checkpoint import check_matching
from hardmix.training.run_folder import CONFIG
from hardmix.utils.confine import (
    current_umask,
    is_full_disk,
    makedirs,
    remove_written,
    replace,
    save_pretrained,
    write_text,
)
from hardmix.utils.offline import libraries_offline

log = logging.getLogger(__name__)

#: Config attributes that hold a dropout probability, by model family (BERT/RoBERTa/MPNet; DistilBERT).
DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout")

#: sentence-transformers pooling mode of each hardmix evaluation pooling (None: no equivalent).
ST_POOLING = {
    "cls": "cls_token", "cls_before_pooler": "cls_token", "avg": "mean_tokens", "avg_first_last": None,
}


def eval_pooling_of(pooling: str) -> str:
    """The pooling used at evaluation and export for a training pooling (``cls`` drops its MLP)."""
    check_pooling(pooling)
    return "cls_before_pooler" if pooling == "cls" else pooling


class MLPHead(nn.Module):
    """SimCSE's MLP over [CLS]: ``tanh(W x + b)``, W (D, D); initialised as BERT's linear layers
    (normal, std ``initializer_range``, zero bias), as SimCSE's ``init_weights`` does."""

    def __init__(self, dim: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)
        self.activation = nn.Tanh()

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.dense(x))


class ContrastiveSentenceModel(nn.Module):
    """A backbone plus pooling (and the MLP head of ``cls``), as trained by the text trainer.

    Args:
        backbone: a transformers encoder (``AutoModel``) whose output has ``last_hidden_state``.
        pooling: the training pooling, one of :data:`hardmix.text.pooling.POOLINGS`.
        tokenizer: its tokenizer (kept for :meth:`encode` and the export).

    Inputs of forward: ``input_ids``, ``attention_mask`` (and ``token_type_ids``) of shape (N, T).
    """

    def __init__(self, backbone: nn.Module, pooling: str, tokenizer: Any = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.pooling = check_pooling(pooling)
        self.eval_pooling = eval_pooling_of(pooling)
        self.tokenizer = tokenizer
        hidden = int(backbone.config.hidden_size)
        std = float(getattr(backbone.config, "initializer_range", 0.02))
        self.mlp = MLPHead(hidden, std) if pooling == "cls" else None

    @property
    def dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
        head: bool = True,
    ) -> Tensor:
        """(N, D) sentence vectors; ``head`` applies the MLP of ``cls`` (training), else the evaluation
        pooling."""
        pooling = self.pooling if head else self.eval_pooling
        z = self._pooled(input_ids, attention_mask, token_type_ids, (pooling,))[pooling]
        if head and self.mlp is not None:
            z = self.mlp(z)
        return z

    def _pooled(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None,
                poolings: Sequence[str]) -> dict[str, Tensor]:
        """Each of ``poolings`` (B, D) of one backbone pass over the batch."""
        kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                            output_hidden_states=any(map(needs_hidden_states, poolings)), return_dict=True,
                            **kwargs)
        hidden = getattr(out, "hidden_states", None)
        return {p: pool(out.last_hidden_state, attention_mask, p, hidden) for p in poolings}

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 128,
        max_length: int | None = None,
        device: torch.device | str | None = None,
    ) -> np.ndarray:
        """(n, D) float32 embeddings with the evaluation pooling, in eval mode (restored afterwards).

        Batches are formed over sentences sorted by length (less padding); no random number is drawn.
        """
        return self.encode_poolings(sentences, (self.eval_pooling,), batch_size, max_length,
                                    device)[self.eval_pooling]

    @torch.inference_mode()
    def encode_poolings(
        self,
        sentences: Sequence[str],
        poolings: Sequence[str],
        batch_size: int = 128,
        max_length: int | None = None,
        device: torch.device | str | None = None,
    ) -> dict[str, np.ndarray]:
        """(n, D) float32 embeddings for each of ``poolings`` from one forward pass per batch: what
        :meth:`encode` returns with ``eval_pooling`` set to each, bit for bit, at the cost of one."""
        if self.tokenizer is None:
            raise ValueError("encode: this model has no tokenizer")
        device = torch.device(device) if device is not None else next(self.parameters()).device
        max_length = max_length or max_positions(self.backbone, self.tokenizer)
        was_training = self.training
        self.eval()
        try:
            sentences = list(sentences)
            enc = self.tokenizer(sentences, truncation=True, max_length=max_length)
            keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
            order = sorted(range(len(sentences)), key=lambda i: len(enc["input_ids"][i]))
            out = {p: np.zeros((len(sentences), self.dim), dtype=np.float32) for p in poolings}
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                feats = [{k: enc[k][i] for k in keys} for i in idx]
                batch = self.tokenizer.pad(feats, padding=True, return_tensors="pt")
                batch = {k: v.to(device) for k, v in batch.items()}
                pooled = self._pooled(batch["input_ids"], batch["attention_mask"],
                                      batch.get("token_type_ids"), poolings)
                for p, z in pooled.items():
                    out[p][idx] = z.float().cpu().numpy()
            return out
        finally:
            self.train(was_training)


def forward_views(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Two dropout views of a batch from one forward pass over the batch duplicated (SimCSE).

    Row i of the batch becomes rows 2i and 2i + 1 of the duplicated batch (SimCSE's ``(bs, 2, len)``
    layout), so the two copies of a sentence are two rows of one forward pass with independent dropout.

    Args:
        model: a :class:`ContrastiveSentenceModel` (or a DistributedDataParallel around one).
        batch: ``input_ids``, ``attention_mask`` (and ``token_type_ids``), each (B, T).

    Returns:
        z1, z2: (B, D) each, the training pooling (with the MLP of ``cls``).
    """
    dup = {k: v.repeat_interleave(2, dim=0) for k, v in batch.items()}
    z = model(dup["input_ids"], dup["attention_mask"], dup.get("token_type_ids"))
    z = z.view(-1, 2, z.shape[-1])
    return z[:, 0], z[:, 1]


def max_positions(backbone: nn.Module, tokenizer: Any) -> int:
    """The longest input the encoder takes: the tokenizer's ``model_max_length`` when it is a real value,
    capped by the position embeddings (minus 2 for RoBERTa-style positions); the same rule as
    :class:`hardmix.text.encoder.SentenceEncoder`."""
    config = backbone.config
    limit = int(getattr(config, "max_position_embeddings", None) or 512)
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2
    tok_max = getattr(tokenizer, "model_max_length", None)
    return int(min(tok_max if tok_max and tok_max < 100_000 else limit, limit))


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report while loading a model (the level is restored afterwards)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def load_backbone(
    path_or_name: str, dropout: float | None = None, local_only: bool = False
) -> tuple[nn.Module, Any]:
    """Load ``AutoModel`` (without the pooler layer where the class has one, as SimCSE's ``BertForCL``)
    and ``AutoTokenizer``.

    Args:
        path_or_name: a local folder or a Hub name.
        dropout: if given, set every dropout probability of the config to it.
        local_only: never reach the network (a Hub name must be in the local cache).
    """
    with model_folder_errors(path_or_name, "model.name_or_path: "):
        return _load_backbone(path_or_name, dropout, local_only)


@contextlib.contextmanager
def model_folder_errors(path: str | os.PathLike[str], key: str = "") -> Iterator[None]:
    """Loading a model folder with transformers: an incomplete folder (no weights, tokenizer or config)
    and weights that do not deserialize (a damaged safetensors or pickle file) become one ValueError
    naming ``key`` and the folder; other errors pass."""
    import pickle

    from safetensors import SafetensorError

    try:
        yield
    except OSError as e:  # transformers: a folder without its weights, tokenizer or config
        if getattr(e, "strerror", None) or not Path(path).is_dir():
            raise
        raise ValueError(f"{key}{path} is not a complete model folder ({_first(e)}); it needs config.json, "
                         "the weights and the tokenizer files, as save_pretrained writes them") from None
    except (SafetensorError, pickle.UnpicklingError, RuntimeError) as e:  # weights that do not deserialize
        if isinstance(e, RuntimeError) and "PytorchStreamReader" not in str(e):
            raise
        raise ValueError(f"{key}{path}: its weights cannot be read ({_first(e)}); the file is damaged: "
                         "download or export the model again") from None


def _first(e: BaseException) -> str:
    """An exception's first line (its type's name when it has no message)."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _load_backbone(path_or_name: str, dropout: float | None, local_only: bool) -> tuple[nn.Module, Any]:
    from transformers import AutoConfig, AutoTokenizer

    with libraries_offline(), quiet_transformers():
        config = AutoConfig.from_pretrained(path_or_name, local_files_only=local_only)
        if dropout is not None:
            for key in DROPOUT_KEYS:
                if isinstance(getattr(config, key, None), float):
                    setattr(config, key, float(dropout))
        tokenizer = AutoTokenizer.from_pretrained(path_or_name, local_files_only=local_only)
        backbone = pretrained_model(path_or_name, "model.name_or_path: ", config=config,
                                    local_only=local_only)
    return backbone, tokenizer


def weights_file(path: str | os.PathLike[str]) -> str:
    """The weights file of a model folder, for an error to name (``FOLDER/model.safetensors``); the
    folder (or Hub name) itself where there is no single such file."""
    for name in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json"):
        if (Path(path) / name).is_file():
            return str(Path(path) / name)
    return str(path)


def pretrained_model(path_or_name: str | os.PathLike[str], key: str = "", config: Any = None,
                     local_only: bool = True) -> nn.Module:
    """``AutoModel.from_pretrained`` (without the pooler layer where the class has one: no pooling of
    hardmix reads it), checked key by key like every checkpoint hardmix loads
    (:func:`hardmix.training.checkpoint.check_matching`, from transformers' own loading report): a weights
    file missing a tensor of the model, or holding one of another shape, is refused in one line naming
    ``key`` (``model.name_or_path: ``) and the weights file, never loaded with randomly initialised tensors
    in its place. A checkpoint's extra tensors (a pretraining head, ``cls.*``) are left out, as
    transformers does.

    Raises:
        ValueError: the weights do not match the model (one line).
    """
    from transformers import AutoModel

    kwargs: dict[str, Any] = {"local_files_only": local_only, "output_loading_info": True,
                              "ignore_mismatched_sizes": True}  # reported below, not raised as a traceback
    if config is not None:
        kwargs["config"] = config
    with libraries_offline():
        try:
            model, info = AutoModel.from_pretrained(path_or_name, add_pooling_layer=False, **kwargs)
        except TypeError:  # a class without a pooler
            model, info = AutoModel.from_pretrained(path_or_name, **kwargs)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = set(info.get("missing_keys") or ())
    given = {k: s for k, s in expected.items() if k not in missing}
    for entry in info.get("mismatched_keys") or ():
        name, stored = entry[0], entry[1]  # (key, the file's shape, the model's shape)
        if name in given:
            given[name] = tuple(stored)
    # the model's tensors that no file stores (tied weights, non-persistent buffers) are not reported
    check_matching(expected, given, f"{key}{weights_file(path_or_name)}")
    return model


def _write_json(obj: Any, path: Path, root: Path) -> None:
    write_text(json.dumps(obj, indent=2) + "\n", path, root)


def _write_card(meta: dict[str, Any], base_model: str | None, model: ContrastiveSentenceModel, st: bool,
                out_dir: Path, tmp: Path) -> None:
    """``README.md``: the model card (base model, strategy, scores, and the run's ``config.yaml`` when the
    export is a run folder's ``best/``)."""
    import yaml

    from hardmix.text.model_card import model_card

    config = None
    run_config = out_dir.parent / CONFIG
    if run_config.is_file():
        try:
            config = yaml.safe_load(run_config.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            config = None
    card = model_card(meta, base_model, model.eval_pooling, model.dim, st, config if isinstance(config, dict)
                      else None)
    write_text(card, tmp / "README.md", out_dir.parent)


def export_model(
    model: ContrastiveSentenceModel,
    out_dir: str | os.PathLike[str],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` as a Hugging Face folder that hardmix, transformers and sentence-transformers load.

    Written to a temporary sibling folder, then swapped in (a crash never leaves a half folder at
    ``out_dir``).

    Files: the backbone (``save_pretrained``) and tokenizer; ``hardmix.json`` with the evaluation pooling,
    the training pooling, the base model the weights were loaded from (``base_model``) and ``extra``;
    ``README.md``, the model card (:mod:`hardmix.text.model_card`); unless the pooling is
    ``avg_first_last``: ``modules.json``,
    ``sentence_bert_config.json`` (``max_seq_length`` = :func:`max_positions`) and
    ``1_Pooling/config.json`` (sentence-transformers' classic layout, which every version reads).
    """
    if model.tokenizer is None:
        raise ValueError("export: the model has no tokenizer")
    out_dir = Path(out_dir)
    root = out_dir.parent  # the folder the export path names: everything written stays in it
    tmp = root / f".{out_dir.name}.tmp"
    old = root / f".{out_dir.name}.old"
    for p in (tmp, old):
        remove_written(p, root)
    makedirs(tmp, root)
    try:  # a failure (a full disk) removes the half-written folder and names the export, not its temporary
        save_pretrained(model.backbone, tmp, root)
        save_pretrained(model.tokenizer, tmp, root)
        mode = ST_POOLING[model.eval_pooling]
        max_len = max_positions(model.backbone, model.tokenizer)
        base_model = getattr(model.backbone.config, "_name_or_path", None) or None
        meta = {"pooling": model.eval_pooling, "train_pooling": model.pooling,
                "sentence_transformers": mode is not None, "base_model": base_model, **(extra or {})}
        if mode is None:
            meta["sentence_transformers_note"] = (
                "avg_first_last has no sentence-transformers pooling; no modules.json was written, so "
                "SentenceTransformer would fall back to mean pooling: use hardmix.text.encode instead")
            log.warning("export %s: avg_first_last has no sentence-transformers equivalent; only hardmix's "
                        "encoder reproduces this pooling (no sentence-transformers files written)", out_dir)
        _write_json(meta, tmp / "hardmix.json", root)
        _write_card(meta, base_model, model, mode is not None, out_dir, tmp)
        if mode is not None:
            _write_json([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ], tmp / "modules.json", root)
            _write_json({"max_seq_length": max_len, "do_lower_case": False},
                        tmp / "sentence_bert_config.json", root)
            pooling_cfg = {"word_embedding_dimension": model.dim}
            for m in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens"):
                pooling_cfg[f"pooling_mode_{m}"] = m == mode
            _write_json(pooling_cfg, tmp / "1_Pooling" / "config.json", root)
        mask = current_umask()
        for f in tmp.rglob("*"):  # what a library wrote private (safetensors: 0600) follows the umask
            f.chmod((0o777 if f.is_dir() else 0o666) & ~mask)
    except Exception as e:
        remove_written(tmp, root)
        if is_full_disk(e):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out_dir)) from e
        raise
    if out_dir.exists():
        replace(out_dir, old, root)
    replace(tmp, out_dir, root)
    remove_written(old, root)
    return out_dir
