"""The ``none`` strategy: plain InfoNCE, the SimCSE and MoCo-v2 baselines."""

from __future__ import annotations

from dataclasses import dataclass

from hardmix.strategies.base import Strategy, register_strategy


@register_strategy
@dataclass(frozen=True)
class NoMixing(Strategy):
    """Plain InfoNCE: no synthetic negatives (SimCSE, MoCo-v2)."""

    name = "none"
    paper = "Gao et al., SimCSE, EMNLP 2021; Chen et al., MoCo-v2, arXiv:2003.04297"
