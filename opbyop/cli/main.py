"""`opbyop`: the command line. Library commands live in opbyop/cli; packages that build on the
library (storage/, flows/) add theirs through the `opbyop.cli` entry point group, so opbyop never
imports them.
"""

from __future__ import annotations

import errno
import os
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

import typer

# Importing the command modules registers their commands on `app`.
from opbyop.cli import compile_run, coverage_cmds, decode_cmds, device_cmds, shrink_cmds, split_cmds  # noqa: F401
from opbyop.cli.app import app, err_console, print_error, styled
from opbyop.errors import OpbyopError
from opbyop.analysis.op_memory import process_out_of_memory
from opbyop.workspace import Workspace


def _register_plugins() -> None:
    """Let storage/ and flows/ add their commands (they depend on opbyop, not the other way round)."""
    for ep in entry_points(group="opbyop.cli"):
        try:
            ep.load()(app)
        except ImportError as e:  # a missing optional package must not break the other commands
            err_console.print(styled(("warning: ", "yellow"), f"commands from {ep.value} unavailable: {e}"))


@cache
def build_app() -> typer.Typer:
    """The app with every command: opbyop's own and the plugins' (once per process)."""
    _register_plugins()
    return app


def main() -> None:
    build_app()
    try:
        app()
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        print_error(disk_full(e))
        sys.exit(1)
    except OpbyopError as e:  # a command that let one through: still the user's message, not a traceback
        print_error(e)
        sys.exit(2)
    except MemoryError:  # the process's memory limit: say how much it held and what to do
        print_error(process_out_of_memory("opbyop"))
        sys.exit(1)


def disk_full(e: OSError) -> OpbyopError:
    """One line for a full disk: which file system, and what to do."""
    where = Path(e.filename) if e.filename else Workspace.default().root  # where opbyop writes
    mount = _mount_point(where)
    return OpbyopError(f"the disk is full: writing {e.filename or 'a file'} failed ({e.strerror}) on {mount}",
                       f"free space on {mount} (or point OPBYOP_HOME elsewhere), then run the same command again: "
                       "what was already done is kept")


def _mount_point(path: Path) -> Path:
    path = next((p for p in (path, *path.parents) if p.exists()), Path("/")).resolve()
    while not os.path.ismount(path) and path.parent != path:
        path = path.parent
    return path


if __name__ == "__main__":
    main()
