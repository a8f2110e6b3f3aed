"""`opbyop`: the command line. Library commands live in opbyop/cli; packages that build on the
library (storage/, flows/) add theirs through the `opbyop.cli` entry point group, so opbyop never
imports them.

A plugin module may also define `prepare(argv)`: main calls it first, before the command line is
built (importing every command takes a second or more), so that what a command will wait for (flows/:
analyze's Prefect server and Dask cluster) starts while the rest is imported.
"""

from __future__ import annotations

import atexit
import errno
import importlib
import os
import sys
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import NoReturn

import typer

from opbyop.environment import workspace_root
from opbyop.errors import OpbyopError


def _prepare_plugins(argv: list[str]) -> tuple[object, ...]:
    """What each plugin module's `prepare(argv)` returned, if it has one (the commands receive it as
    typer's context object; a plugin that fails to load is reported when its commands are registered)."""
    prepared = []
    for ep in entry_points(group="opbyop.cli"):
        try:
            prepare = getattr(importlib.import_module(ep.module), "prepare", None)
        except ImportError:
            continue
        if prepare is not None:
            prepared.append(prepare(argv))
    return tuple(p for p in prepared if p is not None)


def _register_plugins(app: typer.Typer) -> None:
    """Let storage/ and flows/ add their commands (they depend on opbyop, not the other way round)."""
    from opbyop.cli.app import err_console, styled  # deferred with the commands (build_app)

    for ep in entry_points(group="opbyop.cli"):
        try:
            ep.load()(app)
        except ImportError as e:  # a missing optional package must not break the other commands
            err_console.print(styled(("warning: ", "yellow"), f"commands from {ep.value} unavailable: {e}"))


@cache
def build_app() -> typer.Typer:
    """The app with every command: opbyop's own and the plugins' (once per process)."""
    # deferred, not at the top: main lets the plugins prepare first (a second or more of imports here)
    from opbyop.cli import compile_run, coverage_cmds, decode_cmds, device_cmds, shrink_cmds, split_cmds  # noqa: F401
    from opbyop.cli.app import app

    _register_plugins(app)
    return app


def main() -> NoReturn:
    _leave(_run_command(sys.argv[1:]))


def _run_command(argv: list[str]) -> int | str | None:
    """Run the command `argv` names; its exit status (as SystemExit carries it: a number, a message,
    or None for success)."""
    prepared = _prepare_plugins(argv)
    app = build_app()
    # deferred with the commands (build_app): imported once the plugins have prepared
    from opbyop.op_memory import process_out_of_memory
    from opbyop.cli.app import print_error

    try:
        app(obj=prepared)
    except SystemExit as e:
        return e.code
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        print_error(disk_full(e))
        return 1
    except OpbyopError as e:  # a command that let one through: still the user's message, not a traceback
        print_error(e)
        return 2
    except MemoryError:  # the process's memory limit: say how much it held and what to do
        print_error(process_out_of_memory("opbyop"))
        return 1
    return 0


def _leave(status: int | str | None) -> NoReturn:
    """End the process with the command's exit status once its output is flushed and the exit handlers
    have run (Prefect's flushes, multiprocessing's children), skipping the interpreter's teardown of every
    module imported: a second after analyze's last line on 2 cores, for nothing (the system frees the
    memory), and it would keep a pipe reading the output waiting."""
    if isinstance(status, str):  # sys.exit("message"), as the interpreter shows it
        print(status, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that left (`| head`): nothing more to tell it
            pass
    atexit._run_exitfuncs()  # what the interpreter's own exit runs first (CPython's, not a public name)
    os._exit(status if isinstance(status, int) else int(status is not None))


def disk_full(e: OSError) -> OpbyopError:
    """One line for a full disk: which file system, and what to do."""
    where = Path(e.filename) if e.filename else workspace_root()  # where opbyop writes
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
