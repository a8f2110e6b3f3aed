"""Errors a user can act on: each names the problem and the fix."""

from __future__ import annotations


class OpbyopError(Exception):
    """Base class: `problem` says what is wrong, `fix` says what to do about it."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")


class UnknownModelError(OpbyopError):
    pass


class ModuleError(OpbyopError):
    """A StableHLO module that cannot be used as it is (malformed, no @main, dynamic shapes)."""


class ExportError(OpbyopError):
    pass


class SystemDescError(OpbyopError):
    pass


class ConfigError(OpbyopError):
    pass


class ImageError(OpbyopError):
    """A device image that cannot be loaded (corrupt, truncated, hostile, wrong version)."""


class StoreError(OpbyopError):
    pass


class CompilerError(OpbyopError):
    """A compiler that cannot be used as asked: a release that does not exist, a file that holds no
    PJRT plugin, a build that dies loading or that no jax here can drive."""
