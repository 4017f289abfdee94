"""STS scoring: cosine similarity of sentence embeddings against gold scores, Spearman correlation.

The protocol is SentEval's as modified by SimCSE (unsupervised STS): the cosine of the two embeddings of a
pair is the system score (NaN embeddings and NaN cosines count as 0, as in SentEval), and each task is one
Spearman correlation (:func:`scipy.stats.spearmanr`). STS12-16 consist of subsets; they are aggregated by

- ``"all"`` (SimCSE's, the default): one correlation over the concatenation of the subsets;
- ``"mean"``: the plain mean of the per-subset correlations;
- ``"wmean"``: their mean weighted by the number of pairs of each subset.

STS-B and SICK-R are one set each (their test split, with no trained regressor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy.stats import rankdata, spearmanr

from hardmix.text.senteval_data import SentencePairs, scorable

AGGREGATIONS = ("all", "mean", "wmean")

EncodeFn = Callable[[list[str]], np.ndarray]


def cosine_scores(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity, in float64; NaNs become 0 (SentEval's ``nan_to_num``).

    Args:
        a: (n, d) embeddings of the first sentences.
        b: (n, d) embeddings of the second sentences.

    Returns:
        (n,) cosine similarities.
    """
    a = np.nan_to_num(np.asarray(a, dtype=np.float64))
    b = np.nan_to_num(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"expected two (n, d) arrays of the same shape, got {a.shape} and {b.shape}")
    # dot / sqrt(|a|^2 |b|^2): a pair of identical embeddings scores exactly 1.0 (ties stay ties)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos = np.einsum("nd,nd->n", a, b) / np.sqrt(np.einsum("nd,nd->n", a, a) * np.einsum("nd,nd->n", b, b))
    return np.nan_to_num(cos)


def spearman(system: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation of ``system`` and ``gold`` scores (both (n,)), via scipy."""
    return float(spearmanr(system, gold)[0])


def aggregate(per_subset: Mapping[str, tuple[np.ndarray, np.ndarray]], how: str = "all") -> float:
    """Aggregate the subsets of one STS year into one Spearman correlation.

    Args:
        per_subset: subset name -> (system scores (n_i,), gold scores (n_i,)).
        how: ``"all"`` (one correlation over the concatenated subsets), ``"mean"`` or ``"wmean"``
            (mean of the per-subset correlations, unweighted or weighted by n_i).

    Returns:
        The correlation in [-1, 1].
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; expected one of {AGGREGATIONS}")
    if not per_subset:
        raise ValueError("no subsets to aggregate")
    if how == "all":
        system = np.concatenate([s for s, _ in per_subset.values()])
        gold = np.concatenate([g for _, g in per_subset.values()])
        return spearman(system, gold)
    rhos = np.array([spearman(s, g) for s, g in per_subset.values()])
    weights = np.array([len(g) for _, g in per_subset.values()], dtype=np.float64)
    return float(np.average(rhos, weights=weights if how == "wmean" else None))


def system_scores(embed: Callable[[list[str]], np.ndarray], pairs: SentencePairs) -> np.ndarray:
    """Cosine system scores of ``pairs``.

    Args:
        embed: maps a list of n sentences to an (n, d) array.
        pairs: the sentence pairs.

    Returns:
        (len(pairs),) cosine similarities.

    Raises:
        ValueError: a degenerate evaluation set (:func:`hardmix.text.senteval_data.scorable`: fewer than 2
            pairs, constant gold scores, a pair with an empty side), naming its file: every STS scorer
            (:func:`score_pairs`, :func:`score_year`, STS-B dev selection) goes through here.
    """
    scorable(pairs, pairs.source or "the evaluation set")
    return cosine_scores(embed(pairs.sent1), embed(pairs.sent2))


def score_pairs(embed: EncodeFn, pairs: SentencePairs) -> float:
    """Spearman correlation (in [-1, 1]) of the cosine scores of ``pairs`` with their gold scores."""
    return spearman(system_scores(embed, pairs), pairs.labels)


def score_year(embed: EncodeFn, subsets: Mapping[str, SentencePairs], how: str = "all") -> tuple[float, dict]:
    """Score one STS12-16 year.

    Args:
        embed: maps a list of n sentences to an (n, d) array.
        subsets: subset name -> pairs (from :func:`hardmix.text.senteval_data.load_sts_year`).
        how: the aggregation (``"all"``, ``"mean"``, ``"wmean"``).

    Returns:
        (aggregated correlation, {subset: (correlation, n pairs)}).
    """
    per = {name: (system_scores(embed, p), p.labels) for name, p in subsets.items()}
    details = {name: (spearman(s, g), len(g)) for name, (s, g) in per.items()}
    return aggregate(per, how), details


def _rowwise_spearman(system: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``system`` with the same row of ``gold`` (both (R, n)): the
    Pearson correlation of their average ranks, as :func:`scipy.stats.spearmanr`."""
    a, b = rankdata(system, axis=1), rankdata(gold, axis=1)
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def bootstrap_se(
    per_task: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    how: str = "all",
    resamples: int = 1000,
    seed: int = 0,
    chunk: int = 250,
) -> dict[str, float]:
    """Bootstrap standard errors (x 100) of each task's Spearman correlation and of their mean: the test
    pairs are resampled with replacement within each subset (``resamples`` times, a NumPy generator seeded
    with ``seed``, so every model is judged on the same resamples), each task is re-aggregated as
    :func:`aggregate` does, and the standard deviation of the replicates is the error.

    Args:
        per_task: task -> {subset: (system scores (n,), gold scores (n,))} (one subset for STS-B, SICK-R;
            :func:`hardmix.text.evaluation.evaluate_sts`'s ``details["pairs"]``).
        how: the STS12-16 aggregation (``"all"``, ``"mean"``, ``"wmean"``).
        resamples: bootstrap replicates.
        seed: the resampling's seed.
        chunk: replicates computed at a time (bounds the memory).

    Returns:
        ``{task: se, ..., "avg": se}`` in Spearman x 100.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> gold = rng.normal(size=400)
        >>> se = bootstrap_se({"A": {"a": (gold + rng.normal(size=400), gold)}}, resamples=200)
        >>> 1.0 < se["A"] < 6.0 and se["avg"] == se["A"]
        True
    """
    if how not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {how!r}; expected one of {AGGREGATIONS}")
    if resamples < 2:
        raise ValueError(f"resamples: need at least 2, got {resamples}")
    rng = np.random.default_rng(seed)
    replicates: dict[str, list[np.ndarray]] = {task: [] for task in per_task}
    for start in range(0, resamples, chunk):
        r = min(chunk, resamples - start)
        for task, subsets in per_task.items():
            drawn = []
            for system, gold in subsets.values():
                system, gold = np.asarray(system, dtype=np.float64), np.asarray(gold, dtype=np.float64)
                idx = rng.integers(0, len(gold), size=(r, len(gold)))
                drawn.append((system[idx], gold[idx]))
            if how == "all" or len(drawn) == 1:
                rho = _rowwise_spearman(np.concatenate([s for s, _ in drawn], axis=1),
                                        np.concatenate([g for _, g in drawn], axis=1))
            else:
                rhos = np.stack([_rowwise_spearman(s, g) for s, g in drawn], axis=1)
                weights = np.array([g.shape[1] for _, g in drawn], dtype=np.float64)
                rho = np.average(rhos, axis=1, weights=weights if how == "wmean" else None)
            replicates[task].append(100.0 * rho)
    reps = {task: np.concatenate(parts) for task, parts in replicates.items()}
    out = {task: float(np.std(r, ddof=1)) for task, r in reps.items()}
    out["avg"] = float(np.std(np.mean(np.stack(list(reps.values())), axis=0), ddof=1))
    return out
