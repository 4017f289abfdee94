"""Mixing strategies, registered by name: ``none``, ``mixcse``, ``mixcse_adaptive``, ``mochi``.

Example:
    >>> from hardmix.strategies import available_strategies
    >>> available_strategies()
    ['mixcse', 'mixcse_adaptive', 'mochi', 'none']
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
from hardmix.strategies.mixcse import MixCSE
from hardmix.strategies.mixcse_adaptive import MixCSEAdaptive
from hardmix.strategies.mochi import MoCHi
from hardmix.strategies.none import NoMixing

__all__ = [
    "ContrastContext",
    "MixCSE",
    "MixCSEAdaptive",
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
