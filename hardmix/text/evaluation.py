"""SentEval-protocol evaluation of a sentence encoder: STS (unsupervised) and transfer tasks.

``hardmix eval text MODEL`` runs :func:`cli_main`. The trainer's model selection calls
:func:`stsb_dev_score`. Scores are x 100 with two decimals; averages are the mean of the rounded task
scores, rounded again (as SimCSE prints them). Column order is the papers':

- STS: STS12, STS13, STS14, STS15, STS16, STS-B, SICK-R (STS-B and SICK-R: test split, cosine, no regressor);
- transfer: MR, CR, SUBJ, MPQA, SST, TREC, MRPC (accuracy).

An encoder is a :class:`hardmix.text.encoder.SentenceEncoder` or any callable mapping a list of n sentences
to an (n, d) array. Every distinct sentence of a task group is encoded once, up front (with a progress
bar), then the tasks are scored from that table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hardmix.text import senteval_data as data
from hardmix.text import senteval_protocol as sp
from hardmix.text.sts import AGGREGATIONS, score_pairs, score_year, spearman, system_scores

STS_TASKS: tuple[str, ...] = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R")
TRANSFER_TASKS: tuple[str, ...] = ("MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC")
#: The transfer protocol, recorded with every transfer result: official SentEval's (Adam, early stopping;
#: :mod:`hardmix.text.senteval_protocol`), the one the papers' tables use and the only one hardmix runs.
PROTOCOL = "senteval"

EncodeFn = Callable[[list[str]], np.ndarray]


# ------------------------------------------------------------------------------------------ helpers
def _encode_tasks(encoder, sentences: dict[str, list[str]], desc: str, show_progress: bool = True,  # noqa: ANN001
                  chunk: int = 4096) -> tuple[EncodeFn, dict[str, float]]:
    """Encode every distinct sentence once, task by task, under one progress bar.

    Args:
        encoder: a SentenceEncoder (its batching and cache are used) or a callable ``list[str] -> (n, d)``
            (called on chunks of ``chunk`` sentences).
        sentences: task -> the sentences it will ask for.
        desc: progress bar label.
        show_progress: draw the progress bar.
        chunk: chunk size for plain callables.

    Returns:
        (lookup ``list[str] -> (n, d) float32``, task -> seconds spent encoding its new sentences).
    """
    index: dict[str, int] = {}
    parts: list[np.ndarray] = []
    seconds: dict[str, float] = {}
    total = len(set().union(*sentences.values())) if sentences else 0
    bar = tqdm(total=total, desc=desc, unit="sent", disable=not show_progress, file=sys.stderr,
               dynamic_ncols=True)
    is_encoder = hasattr(encoder, "encode") and hasattr(encoder, "clear_cache")
    for task, sents in sentences.items():
        t0 = time.perf_counter()
        new = [s for s in dict.fromkeys(sents) if s not in index]
        if is_encoder and new:
            before = bar.n
            parts.append(encoder.encode(new, progress=bar))
            if bar.n - before < len(new):  # sentences already in the encoder's cache
                bar.update(len(new) - (bar.n - before))
        else:
            for start in range(0, len(new), chunk):
                parts.append(np.asarray(encoder(new[start:start + chunk]), dtype=np.float32))
                bar.update(len(parts[-1]))
        got = sum(len(p) for p in parts)
        if got != len(index) + len(new):
            raise ValueError(f"the encoder returned {got - len(index)} embeddings for {len(new)} sentences")
        base = len(index)
        index.update((s, base + i) for i, s in enumerate(new))
        seconds[task] = time.perf_counter() - t0
    bar.close()
    table = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)

    def lookup(batch: list[str]) -> np.ndarray:
        return table[[index[s] for s in batch]]

    return lookup, seconds


def _pct(x: float) -> float:
    return round(100.0 * float(x), 2)


def _with_avg(scores: dict[str, float]) -> dict[str, float]:
    out = dict(scores)
    out["avg"] = round(float(np.mean(list(scores.values()))), 2) if scores else float("nan")
    return out


def _check_tasks(tasks: Sequence[str], known: Sequence[str]) -> list[str]:
    bad = [t for t in tasks if t not in known]
    if bad:
        raise ValueError(f"unknown task(s) {bad}; expected some of {list(known)}")
    return [t for t in known if t in tasks]  # the papers' order


# ---------------------------------------------------------------------------------------------- STS
def load_sts_suite(
    tasks: Sequence[str] = STS_TASKS, root: str | os.PathLike[str] | None = None
) -> dict[str, dict[str, data.SentencePairs]]:
    """Load the STS tasks: task -> {subset: pairs} (STS-B and SICK-R: ``{"test": pairs}``)."""
    suite: dict[str, dict[str, data.SentencePairs]] = {}
    for task in _check_tasks(tasks, STS_TASKS):
        if task == "STS-B":
            suite[task] = {"test": data.load_stsb("test", root)}
        elif task == "SICK-R":
            suite[task] = {"test": data.load_sickr("test", root)}
        else:
            suite[task] = data.load_sts_year(task, root)
    return suite


def evaluate_sts(
    encoder,  # noqa: ANN001 (SentenceEncoder or callable)
    aggregation: str = "all",
    tasks: Sequence[str] = STS_TASKS,
    root: str | os.PathLike[str] | None = None,
    show_progress: bool = True,
    details: dict | None = None,
) -> dict[str, float]:
    """Unsupervised STS: Spearman x 100 of the cosine similarities, per task, plus ``"avg"``.

    Args:
        encoder: a SentenceEncoder or a callable ``list[str] -> (n, d)``.
        aggregation: STS12-16 aggregation, ``"all"`` (SimCSE, default), ``"mean"`` or ``"wmean"``.
        tasks: a subset of :data:`STS_TASKS`.
        root: the SentEval data folder (default ``$HARDMIX_DATA/senteval``).
        show_progress: progress bar while encoding.
        details: if a dict is given, per-subset correlations and timings are stored in it, and under
            ``"pairs"`` each task's {subset: (system scores (n,), gold scores (n,))} (what
            :func:`hardmix.text.sts.bootstrap_se` resamples).

    Returns:
        ``{"STS12": .., ..., "SICK-R": .., "avg": ..}`` (x 100, two decimals).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {AGGREGATIONS}")
    suite = load_sts_suite(tasks, root)
    t0 = time.perf_counter()
    sentences = {task: [s for p in subsets.values() for s in p.sent1 + p.sent2]
                 for task, subsets in suite.items()}
    embed, enc_seconds = _encode_tasks(encoder, sentences, "encode STS", show_progress)
    t_enc = time.perf_counter() - t0
    scores: dict[str, float] = {}
    per_task: dict[str, dict] = {}
    for task, subsets in suite.items():
        if task in ("STS-B", "SICK-R"):
            scores[task] = _pct(score_pairs(embed, subsets["test"]))
        else:
            rho, sub = score_year(embed, subsets, aggregation)
            scores[task] = _pct(rho)
            per_task[task] = {name: {"spearman": _pct(r), "n": n} for name, (r, n) in sub.items()}
    if details is not None:
        details["pairs"] = {task: {name: (system_scores(embed, p), np.asarray(p.labels, dtype=np.float64))
                                   for name, p in subsets.items()} for task, subsets in suite.items()}
        details.update({"subsets": per_task, "encode_seconds": t_enc, "task_encode_seconds": enc_seconds,
                        "n_sentences": len(set().union(*sentences.values())), "aggregation": aggregation})
    return _with_avg(scores)


_STSB_DEV: dict[str, data.SentencePairs] = {}


def stsb_dev_score(encode_fn: EncodeFn, root: str | os.PathLike[str] | None = None) -> float:
    """STS-B dev Spearman x 100 (unrounded) of cosine similarities: the trainer's model-selection score.

    STS-B dev (1500 pairs) is loaded once per process and kept; every distinct sentence is encoded once,
    in one call.

    Args:
        encode_fn: maps a list of n sentences to an (n, d) array (e.g. a SentenceEncoder, or the trainer's
            own encoding function on its live model).
        root: the SentEval data folder (default ``$HARDMIX_DATA/senteval``).
    """
    key = str(data.senteval_dir(root))
    if key not in _STSB_DEV:
        _STSB_DEV[key] = data.load_stsb("dev", key)
    pairs = _STSB_DEV[key]
    unique = list(dict.fromkeys(pairs.sent1 + pairs.sent2))
    table = np.asarray(encode_fn(unique))
    index = {s: i for i, s in enumerate(unique)}

    def lookup(batch: list[str]) -> np.ndarray:
        return table[[index[s] for s in batch]]

    return 100.0 * spearman(system_scores(lookup, pairs), pairs.labels)


# ----------------------------------------------------------------------------------------- transfer
def load_transfer_suite(
    tasks: Sequence[str] = TRANSFER_TASKS, root: str | os.PathLike[str] | None = None
) -> dict:
    """Load the transfer tasks: MR/CR/SUBJ/MPQA -> LabeledSentences, SST/TREC/MRPC -> {split: data}."""
    suite: dict = {}
    for task in _check_tasks(tasks, TRANSFER_TASKS):
        if task in data.BINARY_FILES:
            suite[task] = data.load_binary(task, root)
        elif task == "SST":
            suite[task] = data.load_sst2(root)
        elif task == "TREC":
            suite[task] = data.load_trec(root)
        else:
            suite[task] = data.load_mrpc(root)
    return suite


def _task_sentences(task: str, d) -> list[str]:  # noqa: ANN001
    if task in data.BINARY_FILES:
        return d.sentences
    if task == "MRPC":
        return [s for split in d.values() for s in split.sent1 + split.sent2]
    return [s for split in d.values() for s in split.sentences]


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's MRPC features of sentence pairs, [|u - v|, u * v]: (n, 2d) from (n, d) embeddings u, v.

    Example:
        >>> pair_features(np.array([[1.0, -2.0]]), np.array([[3.0, 4.0]]))
        array([[ 2.,  6.,  3., -8.]])
    """
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def _f1(pred: np.ndarray, gold: np.ndarray) -> float:
    """F1 x 100 of the positive class (1), two decimals."""
    tp = int(((pred == 1) & (gold == 1)).sum())
    return round(100.0 * 2 * tp / max(1, int((pred == 1).sum()) + int((gold == 1).sum())), 2)


def _sorted_labeled(d, embed: EncodeFn) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """(X, y) of labelled sentences in SentEval's order: sorted by (tokens, label), stable."""
    order = sp.senteval_order([(len(s.split()), int(c)) for s, c in zip(d.sentences, d.labels)])
    return embed([d.sentences[i] for i in order]), np.asarray(d.labels)[order]


def run_transfer_task(
    task: str,
    d,  # noqa: ANN001 (the task's data from load_transfer_suite)
    embed: EncodeFn,
    seed: int = 1111,
    kfold: int = 10,
    l2_grid: tuple[float, ...] = sp.SENTEVAL_L2,
    device=None,  # noqa: ANN001
) -> dict:
    """Run one transfer task's SentEval protocol (:mod:`hardmix.text.senteval_protocol`) on embeddings from
    ``embed``, the samples in SentEval's order (it sorts each task's samples by length and label before its
    folds).

    Args:
        task: one of :data:`TRANSFER_TASKS`.
        d: the task's data from :func:`load_transfer_suite`.
        embed: ``list[str] -> (n, d)`` embeddings.
        seed: the protocol's seed (folds and classifiers).
        kfold: folds.
        l2_grid: L2 values.
        device: torch device of the classifiers.

    Returns:
        The protocol's result dict (``acc``, ``devacc``, ``l2``, ...; MRPC adds ``f1``).
    """
    kw = {"seed": seed, "l2_grid": l2_grid, "device": device}
    if task in data.BINARY_FILES:
        X, y = _sorted_labeled(d, embed)
        return sp.inner_kfold(X, y, 2, k=kfold, **kw)
    if task == "SST":
        (Xtr, ytr), (Xdv, ydv), (Xte, yte) = (_sorted_labeled(d[s], embed) for s in ("train", "dev", "test"))
        return sp.split(Xtr, ytr, Xdv, ydv, Xte, yte, 2, **kw)
    if task == "TREC":
        (Xtr, ytr), (Xte, yte) = (_sorted_labeled(d[s], embed) for s in ("train", "test"))
        return sp.kfold(Xtr, ytr, Xte, yte, len(data.TREC_CLASSES), k=kfold, **kw)
    if task == "MRPC":
        feats = {}
        for s in ("train", "test"):
            p = d[s]
            order = sp.senteval_order([(len(a.split()), len(b.split()), int(c))
                                       for a, b, c in zip(p.sent1, p.sent2, p.labels)])
            u, v = embed([p.sent1[i] for i in order]), embed([p.sent2[i] for i in order])
            feats[s] = (pair_features(u, v), np.asarray(p.labels)[order])
        out = sp.kfold(*feats["train"], *feats["test"], 2, k=kfold, **kw)
        out["f1"] = _f1(out["pred"], feats["test"][1])
        return out
    raise ValueError(f"unknown transfer task {task!r}")


def evaluate_transfer(
    encoder,  # noqa: ANN001 (SentenceEncoder or callable)
    seed: int = 1111,
    tasks: Sequence[str] = TRANSFER_TASKS,
    root: str | os.PathLike[str] | None = None,
    kfold: int = 10,
    device=None,  # noqa: ANN001
    show_progress: bool = True,
    details: dict | None = None,
) -> dict[str, float | str]:
    """Transfer tasks with SentEval's protocol and classifier (logistic regression on frozen embeddings,
    Adam, early stopping; comparable with the papers' transfer tables): test accuracy x 100, plus ``"avg"``.

    Args:
        encoder: a SentenceEncoder or a callable ``list[str] -> (n, d)``.
        seed: seed of the fold assignments and of the classifiers.
        tasks: a subset of :data:`TRANSFER_TASKS`.
        root: the SentEval data folder (default ``$HARDMIX_DATA/senteval``).
        kfold: outer/inner fold count (10, the papers' SentEval setting).
        device: torch device of the classifiers (default CUDA when available, else CPU).
        show_progress: progress bar while encoding.
        details: if a dict is given, per-task protocol results and timings are stored in it.

    Returns:
        ``{"MR": .., "CR": .., "SUBJ": .., "MPQA": .., "SST": .., "TREC": .., "MRPC": .., "avg": ..,
        "protocol": "senteval"}`` (:data:`PROTOCOL`).
    """
    suite = load_transfer_suite(tasks, root)
    t0 = time.perf_counter()
    sentences = {task: _task_sentences(task, d) for task, d in suite.items()}
    embed, enc_seconds = _encode_tasks(encoder, sentences, "encode transfer", show_progress)
    t_enc = time.perf_counter() - t0
    scores: dict[str, float] = {}
    per_task: dict[str, dict] = {}
    for task, d in suite.items():
        t1 = time.perf_counter()
        out = run_transfer_task(task, d, embed, seed=seed, kfold=kfold, device=device)
        out.pop("pred", None)
        out["classifier_seconds"] = time.perf_counter() - t1
        out["encode_seconds"] = enc_seconds[task]
        per_task[task] = out
        scores[task] = out["acc"]
    if details is not None:
        details.update({"tasks": per_task, "encode_seconds": t_enc,
                        "n_sentences": len(set().union(*sentences.values())),
                        "seed": seed, "kfold": kfold, "protocol": PROTOCOL})
    return {**_with_avg(scores), "protocol": PROTOCOL}


# ---------------------------------------------------------------------------------------------- CLI
def format_table(title: str, scores: dict[str, float]) -> str:
    """A Markdown table of ``scores`` (task -> value), columns in the given order, ``avg`` as "Avg."."""
    scores = {k: v for k, v in scores.items() if not isinstance(v, str)}  # e.g. "protocol"
    names = ["Avg." if k == "avg" else k for k in scores]
    cells = [f"{v:.2f}" for v in scores.values()]
    widths = [max(len(n), len(c)) for n, c in zip(names, cells)]
    row = lambda xs: "| " + " | ".join(x.rjust(w) for x, w in zip(xs, widths)) + " |"  # noqa: E731
    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([title, "", row(names), rule, row(cells)])


def cli_main(args: argparse.Namespace) -> int:
    """``hardmix eval text``: evaluate ``args.model`` on ``args.tasks`` (sts, transfer); print the tables and
    write ``args.json_out`` if given."""
    from hardmix.text.encoder import SentenceEncoder

    groups = [g.strip().lower() for g in str(args.tasks).split(",") if g.strip()]
    bad = [g for g in groups if g not in ("sts", "transfer")]
    if bad or not groups:
        raise ValueError(f"--tasks: unknown task group(s) {bad or groups}; "
                         "expected a comma list of sts, transfer")
    data.senteval_dir()  # fail early, naming the folder, when the data is missing
    encoder = SentenceEncoder(args.model, pooling=args.pooling, max_length=args.max_length,
                              batch_size=args.batch_size)
    print(f"model {args.model} ({encoder.info['kind']}), pooling {encoder.pooling}, "
          f"max length {encoder.max_length}, device {encoder.device}", file=sys.stderr)
    results: dict[str, dict[str, float]] = {}
    if "sts" in groups:
        t = time.perf_counter()
        results["sts"] = evaluate_sts(encoder, aggregation=args.aggregation)
        print(format_table(f"STS: Spearman x 100 (cosine; STS12-16 aggregation '{args.aggregation}'; "
                           f"STS-B and SICK-R test) [{time.perf_counter() - t:.0f}s]", results["sts"]))
        print()
    if "transfer" in groups:
        t = time.perf_counter()
        results["transfer"] = evaluate_transfer(encoder)
        print(format_table("Transfer: accuracy x 100 (logistic regression, SentEval's protocol and "
                           "classifier (Adam, early stopping), 10 folds) "
                           f"[{time.perf_counter() - t:.0f}s]", results["transfer"]))
    if args.json_out:
        from hardmix.utils.confine import write_text

        out = Path(args.json_out)
        write_text(json.dumps(results, indent=2) + "\n", out, out.parent)  # inside the folder named
        print(f"wrote {out}", file=sys.stderr)
    return 0
