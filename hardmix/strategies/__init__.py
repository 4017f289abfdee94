"""Strategies, registered by name (``hardmix strategies`` lists them; a package adds its own through the
entry-point group ``hardmix.strategies``).

Example:
    >>> from hardmix.strategies import available_strategies
    >>> {"none", "mixcse", "mochi"} <= set(available_strategies())
    True
"""

from hardmix.strategies import base as _base
from hardmix.strategies.base import (
    ContrastContext,
    Strategy,
    UnnormalizedViews,
    available_strategies,
    describe_strategies,
    register_strategy,
)
from hardmix.strategies.build import BuiltStrategies, build_strategies
from hardmix.strategies.dcl import DCL
from hardmix.strategies.false_negative_filter import FalseNegativeFilter
from hardmix.strategies.hard_copies import HardCopies
from hardmix.strategies.hcl import HCL
from hardmix.strategies.mixcse import MixCSE
from hardmix.strategies.mixcse_adaptive import MixCSEAdaptive
from hardmix.strategies.mochi import MoCHi
from hardmix.strategies.none import NoMixing
from hardmix.strategies.schedule import Ramp, Scheduled
from hardmix.strategies.synco import SynCo

_base._seal_builtins()  # the classes registered above are hardmix's own: known by identity from here on

__all__ = [
    "BuiltStrategies",
    "ContrastContext",
    "DCL",
    "HCL",
    "FalseNegativeFilter",
    "HardCopies",
    "MixCSE",
    "MixCSEAdaptive",
    "MoCHi",
    "NoMixing",
    "Ramp",
    "Scheduled",
    "Strategy",
    "SynCo",
    "UnnormalizedViews",
    "available_strategies",
    "build_strategies",
    "describe_strategies",
    "register_strategy",
]
