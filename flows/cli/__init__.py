"""The commands flows/ adds to `opbyop` (the `opbyop.cli` entry point): analyze, nightly, serve
(commands.py), what they start and stop (launching.py) and what they show (progress.py)."""

from flows.cli.commands import register  # noqa: F401  (the entry point flows.cli:register)
