"""The commands flows/ adds to `opbyop` (the `opbyop.cli` entry point): analyze, nightly, serve
(commands.py), what they start and stop (launching.py) and what they show (progress.py); `prepare`
(early.py) starts analyze's server and cluster before the command line is built."""

from __future__ import annotations

import typer

from opbyop_flows.cli.early import prepare  # noqa: F401  (opbyop's main calls it first, before any command is built)


def register(app: typer.Typer) -> None:
    """The entry point opbyop_flows.cli:register: add analyze, nightly and serve to `app`."""
    from opbyop_flows.cli.commands import register as add_commands  # deferred: seconds of imports, after prepare's starts

    add_commands(app)
