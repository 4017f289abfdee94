"""MoCHi's synthetic hard negatives: ``mochi_synthesize``, ``hardest``, ``sample_distinct_pairs``.

Most tests use negatives that are standard basis vectors e_0..e_{K-1}: a synthetic point's coordinates
then reveal exactly which negatives it mixes and with which weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hardmix.ops.mixing import hardest, sample_distinct_pairs
from hardmix.strategies import MoCHi
from hardmix.strategies.mochi import mochi_synthesize


def _basis_setup(b: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Queries with distinct weights on K orthonormal negatives plus a private direction each.

    Returns (queries (B, K + B) unit, negatives (K, K + B) = e_0..e_{K-1}, weights (B, K)).
    """
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(b, k, generator=g, dtype=torch.float64) * 0.5 / math.sqrt(k)
    q = torch.zeros(b, k + b, dtype=torch.float64)
    q[:, :k] = w
    q[torch.arange(b), k + torch.arange(b)] = torch.sqrt(1 - (w * w).sum(1))
    return q, torch.eye(k + b, dtype=torch.float64)[:k], w.numpy()


def _decode(q: torch.Tensor, synthetic: torch.Tensor, k: int, n_pair: int):
    """Recover the sources of each synthetic point of the basis setup.

    Pair mixtures: the two negative coordinates that are non-zero, and alpha (weight of the smaller index).
    Query mixtures h' ∝ beta q + (1 - beta) e_c: the query part from the private coordinate, c from the
    residual, and beta.
    """
    qn, s = q.numpy(), synthetic.numpy()
    b = len(qn)
    pairs, alphas, picks, betas = [], [], [], []
    for i in range(b):
        row_pairs, row_alpha, row_pick, row_beta = [], [], [], []
        for m in range(s.shape[1]):
            x = s[i, m]
            if m < n_pair:
                assert np.all(np.abs(x[k:]) < 1e-12), "a pair mixture must not contain the query"
                support = np.flatnonzero(np.abs(x[:k]) > 1e-12)
                assert len(support) == 2, f"pair mixture with support {support}"
                a, c = support
                row_pairs.append((int(a), int(c)))
                row_alpha.append(x[a] / (x[a] + x[c]))
            else:
                t = x[k + i] / qn[i, k + i]  # beta / ||.||
                residual = x[:k] - t * qn[i, :k]  # (1 - beta) / ||.|| e_c
                c = int(np.argmax(residual))
                others = np.delete(residual, c)
                assert np.all(np.abs(others) < 1e-9)
                row_pick.append(c)
                row_beta.append(t / (t + residual[c]))
        pairs.append(row_pairs)
        alphas.append(row_alpha)
        picks.append(row_pick)
        betas.append(row_beta)
    return pairs, np.array(alphas), picks, np.array(betas)


def _brute_force_top(w: np.ndarray, n: int, valid: np.ndarray | None = None) -> list[set[int]]:
    out = []
    for i, row in enumerate(w):
        candidates = [j for j in range(len(row)) if valid is None or valid[i, j]]
        out.append(set(sorted(candidates, key=lambda j: -row[j])[:n]))
    return out


def test_output_is_unit_norm_detached_and_pair_mixtures_first() -> None:
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(5, 16, generator=g), dim=1).requires_grad_(True)
    negatives = F.normalize(torch.randn(40, 16, generator=g), dim=1).requires_grad_(True)
    out = mochi_synthesize(q, negatives, n_hard=10, n_pair=7, n_query=3, generator=g)
    assert out.shape == (5, 10, 16)
    assert not out.requires_grad and out.grad_fn is None
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(5, 10), rtol=0, atol=1e-6)
    qb, nb, _ = _basis_setup(3, 12)
    s = mochi_synthesize(qb, nb, n_hard=6, n_pair=5, n_query=4, generator=torch.Generator().manual_seed(1))
    _decode(qb, s, 12, n_pair=5)  # asserts: the first 5 have no query component, the last 4 do


def test_hardest_equal_brute_force_selection() -> None:
    g = torch.Generator().manual_seed(2)
    sims = torch.randn(6, 50, generator=g)
    valid = torch.rand(6, 50, generator=g) > 0.3
    for mask in (None, valid):
        got = hardest(sims, 9, mask)
        assert got.shape == (6, 9)
        s = sims.numpy()
        for i in range(6):
            allowed = [j for j in range(50) if mask is None or bool(mask[i, j])]
            want = set(sorted(allowed, key=lambda j: -s[i, j])[:9])
            assert set(got[i].tolist()) == want


def _top_sets(sims: torch.Tensor, n: int) -> list[set[float]]:
    """Brute force: the n largest values of each row (values, so that ties do not matter), via NumPy."""
    s = sims.double().numpy()
    return [set(np.sort(row)[::-1][:n].tolist()) for row in s]


def _chosen_values(sims: torch.Tensor, idx: torch.Tensor) -> list[set[float]]:
    assert idx.dtype == torch.long and all(len(set(row.tolist())) == idx.shape[1] for row in idx)
    return [set(v.tolist()) for v in sims.double().gather(1, idx)]


def test_hardest_on_long_rows_with_masks_and_ties() -> None:
    """At MoCHi's row length (K = 16 N) with masks and ties, the selection is exactly the top N valid."""
    g = torch.Generator().manual_seed(21)
    b, k, n = 64, 16384, 1024
    sims = torch.randn(b, k, generator=g)
    sims[1] = torch.linspace(-1, 1, k)  # sorted along the queue
    sims[3] = torch.randint(0, 4, (k,), generator=g).float()  # heavy ties
    valid = torch.ones(b, k, dtype=torch.bool)
    valid[4] = torch.rand(k, generator=g) < 0.07  # about 1150 valid negatives
    valid[4, :n] = True
    masked = sims.masked_fill(~valid, float("-inf"))
    got = hardest(sims, n, valid)
    assert got.shape == (b, n)
    assert _chosen_values(masked, got) == _top_sets(masked, n)
    assert bool(valid.gather(1, got).all())


def test_sources_of_every_synthetic_point_are_the_queries_own_top_n() -> None:
    b, k, n = 4, 20, 6
    q, negatives, w = _basis_setup(b, k, seed=3)
    s = mochi_synthesize(
        q, negatives, n_hard=n, n_pair=15, n_query=40, generator=torch.Generator().manual_seed(4)
    )
    pairs, _, picks, _ = _decode(q, s, k, n_pair=15)
    top = _brute_force_top(w, n)
    for i in range(b):
        used = {x for p in pairs[i] for x in p} | set(picks[i])
        # n_pair = 15 = all 6*5/2 pairs: every one of the N hardest is used, and nothing else.
        assert used == top[i]


def test_pairs_are_distinct_and_weights_in_range() -> None:
    b, k, n = 3, 16, 8
    q, negatives, _ = _basis_setup(b, k, seed=5)
    beta_max = 0.3
    s = mochi_synthesize(
        q, negatives, n, n_pair=20, n_query=400, beta_max=beta_max, generator=torch.Generator().manual_seed(6)
    )
    pairs, alphas, _, betas = _decode(q, s, k, n_pair=20)
    for row in pairs:
        assert all(a != c for a, c in row)
        assert len(set(row)) == len(row) == 20  # no repeated pair within a query
    assert np.all((alphas > 0) & (alphas < 1))
    assert np.all((betas > 0) & (betas <= beta_max + 1e-12))
    assert betas.max() > 0.9 * beta_max and betas.min() < 0.1 * beta_max  # U(0, beta_max), not a constant


def test_query_mixtures_lie_nearer_their_negative_than_the_query() -> None:
    b, k = 5, 24
    q, negatives, _ = _basis_setup(b, k, seed=7)
    s = mochi_synthesize(
        q, negatives, n_hard=8, n_pair=0, n_query=64, beta_max=0.5, generator=torch.Generator().manual_seed(8)
    )
    _, _, picks, _ = _decode(q, s, k, n_pair=0)
    for i in range(b):
        for m, c in enumerate(picks[i]):
            x = s[i, m]
            assert float(x @ negatives[c]) > float(x @ q[i])


def test_each_query_mixes_its_own_negatives_not_query_zeros() -> None:
    """Disjoint clusters: query i's hardest negatives form cluster i. A port that mixes query 0's
    negatives for every query (a bug shipped in public code) puts every synthetic point near cluster 0."""
    g = torch.Generator().manual_seed(9)
    b, per, d = 6, 12, 32
    q = torch.linalg.qr(torch.randn(d, b, generator=g)).Q.T.contiguous()  # orthonormal queries
    clusters = F.normalize(q.repeat_interleave(per, 0) + 0.05 * torch.randn(b * per, d, generator=g), dim=1)
    labels = torch.arange(b).repeat_interleave(per)
    order = torch.randperm(b * per, generator=g)
    negatives, labels = clusters[order], labels[order]
    s = mochi_synthesize(q, negatives, n_hard=per, n_pair=30, n_query=10, generator=g)
    nearest = (s @ negatives.T).argmax(dim=-1)  # (B, s + s') index of the nearest negative
    assert torch.equal(labels[nearest], torch.arange(b).view(-1, 1).expand(b, 40))


def test_excluded_negatives_are_never_used() -> None:
    b, k, n = 4, 15, 5
    q, negatives, w = _basis_setup(b, k, seed=10)
    valid = torch.ones(b, k, dtype=torch.bool)
    hardest = torch.from_numpy(w.argmax(1))
    valid[torch.arange(b), hardest] = False  # e.g. the query's own sample
    s = mochi_synthesize(
        q, negatives, n, n_pair=10, n_query=30, valid=valid, generator=torch.Generator().manual_seed(11)
    )
    pairs, _, picks, _ = _decode(q, s, k, n_pair=10)
    top = _brute_force_top(w, n, valid.numpy())
    for i in range(b):
        used = {x for p in pairs[i] for x in p} | set(picks[i])
        assert int(hardest[i]) not in used and used == top[i]


def test_selection_is_fp32_under_bf16_autocast() -> None:
    """Eight negatives whose similarities differ by less than bf16's resolution: in bf16 all tie, and the
    top 2 (indices 3 and 4, placed so that neither a first- nor a last-index tie-break finds them) are
    found only by an fp32 selection."""
    w = 0.30078125 + torch.tensor([1.0, 2, 3, 7, 6, 4, 5, 0]) * 1e-4
    assert torch.unique(w.to(torch.bfloat16)).numel() == 1
    q = torch.cat([w, torch.sqrt(1 - (w * w).sum()).view(1)]).view(1, -1)
    negatives = torch.eye(9)[:8]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        s = mochi_synthesize(q, negatives, n_hard=2, n_pair=1, n_query=0)
    assert set(torch.nonzero(s[0, 0, :8].abs() > 1e-6).flatten().tolist()) == {3, 4}


def test_same_generator_seed_gives_the_same_output() -> None:
    g = torch.Generator().manual_seed(12)
    q = F.normalize(torch.randn(4, 8, generator=g), dim=1)
    negatives = F.normalize(torch.randn(64, 8, generator=g), dim=1)

    def run(seed: int) -> torch.Tensor:
        return mochi_synthesize(q, negatives, 16, 20, 5, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


def _check_pairs(first: torch.Tensor, second: torch.Tensor, n: int, n_pairs: int) -> None:
    assert first.shape == second.shape and first.shape[1] == n_pairs
    assert first.dtype == torch.long
    assert bool((first >= 0).all() and (second < n).all() and (first < second).all())
    codes = first * n + second
    assert all(len(set(row.tolist())) == n_pairs for row in codes)


def test_sample_distinct_pairs_exact_path_is_uniform() -> None:
    # total = 10 <= 4 * n_pairs: drawn exactly by ranking random keys.
    n, n_pairs, batch = 5, 3, 20000
    first, second = sample_distinct_pairs(batch, n, n_pairs, torch.Generator().manual_seed(13))
    _check_pairs(first, second, n, n_pairs)
    counts = torch.bincount((first * n + second).flatten(), minlength=n * n).float()
    counts = counts[counts > 0]
    assert counts.numel() == 10  # all 10 pairs occur
    expected = batch * n_pairs / 10
    assert float((counts - expected).abs().max()) < 5 * math.sqrt(expected)


def test_sample_distinct_pairs_all_pairs_when_as_many_as_exist() -> None:
    first, second = sample_distinct_pairs(7, 6, 15, torch.Generator().manual_seed(14))
    _check_pairs(first, second, 6, 15)


def test_sample_distinct_pairs_rejection_path_redraws_duplicates() -> None:
    # total = 1535 * 1534 / 2 = 1177345 > 4 * n_pairs: the first distinct of draws with replacement.
    n, n_pairs = 1535, 250000
    total = n * (n - 1) // 2
    assert total > 4 * n_pairs
    first, second = sample_distinct_pairs(1, n, n_pairs, torch.Generator().manual_seed(15))
    _check_pairs(first, second, n, n_pairs)
    # Roughly uniform: each item appears in a pair with frequency 2 / n.
    freq = torch.bincount(torch.cat([first, second], 1).flatten(), minlength=n).float() / n_pairs
    assert abs(float(freq.mean()) - 2 / n) < 1e-9 and float(freq.std()) < 0.2 * 2 / n
    # A small batch of large rows, the MoCHi shape (N = 1024, s = 1024), goes the same way.
    first, second = sample_distinct_pairs(4, 1024, 1024, torch.Generator().manual_seed(16))
    _check_pairs(first, second, 1024, 1024)


def test_sample_distinct_pairs_rejection_path_keeps_rows_apart() -> None:
    # Many rows, many repeats (about 40 of 400 draws from 2016 pairs per row): every row distinct.
    n, n_pairs, batch = 64, 400, 1024
    assert n * (n - 1) // 2 > 4 * n_pairs  # the draws with replacement
    first, second = sample_distinct_pairs(batch, n, n_pairs, torch.Generator().manual_seed(17))
    _check_pairs(first, second, n, n_pairs)


def test_sample_distinct_pairs_zero_and_too_many() -> None:
    first, second = sample_distinct_pairs(3, 4, 0)
    assert first.shape == second.shape == (3, 0)
    with pytest.raises(ValueError, match="n_pair"):
        sample_distinct_pairs(2, 4, 7)


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"beta_max": 0.51}, "beta_max"),
        ({"beta_max": 0.0}, "beta_max"),
        ({"n_hard": 41}, "n_hard"),
        ({"n_hard": 0}, "n_hard"),
        ({"n_hard": 5, "n_pair": 11}, "n_pair"),
        ({"n_pair": -1}, "n_pair"),
        ({"n_query": -2}, "n_query"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs: dict, argument: str) -> None:
    q = F.normalize(torch.randn(3, 8), dim=1)
    negatives = F.normalize(torch.randn(40, 8), dim=1)
    args = {"n_hard": 10, "n_pair": 4, "n_query": 2, **kwargs}
    with pytest.raises(ValueError, match=argument):
        mochi_synthesize(q, negatives, **args)
    if argument != "n_hard" or kwargs["n_hard"] < 1:
        with pytest.raises(ValueError, match=argument):
            MoCHi(**args)


def test_n_hard_larger_than_the_valid_negatives_raises() -> None:
    q = F.normalize(torch.randn(2, 8), dim=1)
    negatives = F.normalize(torch.randn(12, 8), dim=1)
    valid = torch.ones(2, 12, dtype=torch.bool)
    valid[1, :5] = False  # row 1 keeps only 7
    with pytest.raises(ValueError, match="n_hard"):
        mochi_synthesize(q, negatives, n_hard=8, n_pair=2, n_query=0, valid=valid)
    assert mochi_synthesize(q, negatives, n_hard=7, n_pair=2, n_query=0, valid=valid).shape == (2, 2, 8)
