"""`opbyop`: the command line. Library commands live in opbyop/cli; packages that build on the
library (storage/, flows/) add theirs through the `opbyop.cli` entry point group, so opbyop never
imports them.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from opbyop.cli.app import app, err_console, styled


def _register_plugins() -> None:
    """Let storage/ and flows/ add their commands (they depend on opbyop, not the other way round)."""
    for ep in entry_points(group="opbyop.cli"):
        try:
            ep.load()(app)
        except ImportError as e:  # a missing optional package must not break the other commands
            err_console.print(styled(("warning: ", "yellow"), f"commands from {ep.value} unavailable: {e}"))


def main() -> None:
    from opbyop.cli import compile_run, coverage_cmds, device_cmds, split_cmds  # noqa: F401  (they register their commands)

    _register_plugins()
    app()


if __name__ == "__main__":
    main()
