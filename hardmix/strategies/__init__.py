"""Mixing strategies, registered by name: ``none``, ``mixcse``, ``mochi``, ``false_negative_filter``,
``hard_copies``.

Example:
    >>> from hardmix.strategies import available_strategies
    >>> available_strategies()
    ['false_negative_filter', 'hard_copies', 'mixcse', 'mochi', 'none']
"""

from hardmix.strategies.base import (
    ContrastContext,
    ParamInfo,
    Strategy,
    UnnormalizedViews,
    available_strategies,
    build_strategies,
    build_strategy,
    describe_strategies,
    register_strategy,
    strategy_class,
)
from hardmix.strategies.false_negative_filter import FalseNegativeFilter
from hardmix.strategies.hard_copies import HardCopies
from hardmix.strategies.mixcse import MixCSE
from hardmix.strategies.mochi import MoCHi
from hardmix.strategies.none import NoMixing

__all__ = [
    "ContrastContext",
    "FalseNegativeFilter",
    "HardCopies",
    "MixCSE",
    "MoCHi",
    "NoMixing",
    "ParamInfo",
    "Strategy",
    "available_strategies",
    "build_strategies",
    "build_strategy",
    "describe_strategies",
    "register_strategy",
    "strategy_class",
    "UnnormalizedViews",
]
