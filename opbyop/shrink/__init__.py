"""The failing shape boundary: where an op starts failing, by dimension and element type."""

from opbyop.shrink.result import Outcome, ShrinkBoundary, ShrinkResult, ShrinkVariant
from opbyop.shrink.search import Shrinker

__all__ = ["Outcome", "ShrinkBoundary", "ShrinkResult", "ShrinkVariant", "Shrinker"]
