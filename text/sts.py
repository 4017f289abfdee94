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
from scipy.stats import spearmanr

from hardmix.text.senteval_data import SentencePairs

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
    """
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
