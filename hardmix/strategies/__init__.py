"""Strategies, registered by name: ``none``, ``mixcse``, ``mixcse_adaptive``, ``mochi``, ``synco``,
``hcl``, ``dcl``, ``false_negative_filter``, ``hard_copies``.

Example:
    >>> from hardmix.strategies import available_strategies
    >>> names = available_strategies()
    >>> names[:5]
    ['dcl', 'false_negative_filter', 'hard_copies', 'hcl', 'mixcse']
    >>> names[5:]
    ['mixcse_adaptive', 'mochi', 'none', 'synco']
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
from hardmix.strategies.dcl import DCL
from hardmix.strategies.false_negative_filter import FalseNegativeFilter
from hardmix.strategies.hard_copies import HardCopies
from hardmix.strategies.hcl import HCL
from hardmix.strategies.mixcse import MixCSE
from hardmix.strategies.mixcse_adaptive import MixCSEAdaptive
from hardmix.strategies.mochi import MoCHi
from hardmix.strategies.none import NoMixing
from hardmix.strategies.synco import SynCo

__all__ = [
    "ContrastContext",
    "DCL",
    "HCL",
    "FalseNegativeFilter",
    "HardCopies",
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
    "SynCo",
    "UnnormalizedViews",
]
