"""MoCHi's random draws are pinned: a seeded generator gives the draws it gave before MoCHi's selection and
draws moved into ``strategies/mochi.py`` (the committed results depend on them), and the ``hard_copies``
control, which draws in its own file, makes the same generator calls in the same order (its copies are
MoCHi's sources, and the generator is left where MoCHi leaves it), in-batch and against a queue."""

from __future__ import annotations

import pytest
import torch

from hardmix.losses import ContrastiveLoss
from hardmix.strategies.hard_copies import copy_positions
from hardmix.strategies.mochi import MoCHi

CPU = torch.device("cpu")


def test_the_draws_of_a_seed_are_those_of_before() -> None:
    """Literal draws of the code before the move (the exact path of the pairs, N = 5, in float64)."""
    d = MoCHi(5, 3, 2, 0.5).draws(2, torch.Generator().manual_seed(0), CPU, torch.float64)
    assert d.first.tolist() == [[2, 0, 1], [2, 1, 1]] and d.second.tolist() == [[3, 2, 3], [3, 4, 3]]
    assert d.pick.tolist() == [[3, 0], [0, 0]]
    assert d.alpha.tolist() == [[0.4528688488811142, 0.17679952620371409, 0.35526675833930643],
                                [0.6219052486795277, 0.48184840078170854, 0.4408004990443595]]
    assert d.beta.tolist() == [[0.3325190878750747, 0.39243695022755887],
                               [0.10518323745919228, 0.33836956045883954]]


def test_the_rejection_path_s_draws_are_those_of_before() -> None:
    """N = 64, s = 6: the pairs by rejection of repeats, alpha and beta in float32."""
    d = MoCHi(64, 6, 2, 0.5).draws(1, torch.Generator().manual_seed(1), CPU, torch.float32)
    assert d.first.tolist() == [[34, 43, 12, 8, 44, 9]] and d.second.tolist() == [[37, 52, 55, 62, 63, 18]]
    assert d.pick.tolist() == [[8, 24]]
    alpha = [0.23458993434906006, 0.6470523476600647, 0.3556213974952698, 0.44518280029296875,
             0.019305944442749023, 0.26160913705825806]
    assert torch.equal(d.alpha, torch.tensor([alpha]))
    assert torch.equal(d.beta, torch.tensor([[0.49901238083839417, 0.4503971040248871]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_hard, n_pair, n_query", [(5, 3, 2), (64, 40, 16), (6, 15, 0), (6, 0, 4)])
def test_hard_copies_draws_what_mochi_draws(dtype, n_hard: int, n_pair: int, n_query: int) -> None:
    mochi_gen, copy_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    d = MoCHi(n_hard, n_pair, n_query, 0.5).draws(3, mochi_gen, CPU, dtype)
    positions = copy_positions(3, n_hard, n_pair, n_query, copy_gen, CPU, dtype)
    assert torch.equal(positions, torch.cat([d.first, d.pick], dim=1))
    assert torch.equal(torch.rand(4, generator=mochi_gen), torch.rand(4, generator=copy_gen))  # same state


def _views(seed: int, rows: int) -> torch.Tensor:
    return torch.randn(rows, 16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("mode", ["in_batch", "queue"])
def test_in_the_loss_the_control_leaves_the_generator_where_mochi_does(mode: str) -> None:
    """Through the whole loss (in-batch in both directions: the second draws after the first), the two
    strategies take as many random numbers from the generator (the columns themselves are compared with
    MoCHi's draws in ``test_hard_copies.py``)."""
    z1, z2, queue = _views(1, 12), _views(2, 12), _views(3, 40)
    after = []
    for name in ("mochi", "hard_copies"):
        loss = ContrastiveLoss(0.1, {"name": name, "n_hard": 6, "n_pair": 7, "n_query": 3},
                               both_directions=mode == "in_batch")
        gen = torch.Generator().manual_seed(5)
        if mode == "in_batch":
            loss.in_batch(z1, z2, generator=gen)
        else:
            loss.queue(z1, z2, queue, generator=gen)
        after.append(torch.rand(3, generator=gen))
    assert torch.equal(after[0], after[1])
