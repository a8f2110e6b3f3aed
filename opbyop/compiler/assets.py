"""The plugin's runtime assets and its temporary directory.

On first load, a build of the plugin unpacks ~417 MB of tt-metal runtime assets into $TMPDIR (two
processes doing it at once fail: 'failed to extract embedded tt-metal runtime archive'), and every
process writes its system descriptor to $TMPDIR/tt_pjrt_system_descriptor and DELETES it when it
exits, which breaks every other compiler process sharing that $TMPDIR ('system desc does not
exist'). So assets are unpacked once per build, into the build's own folder
(opbyop.compiler.builds.unpack_assets), and each compiler process gets a private $TMPDIR that links
to them.
Both cost seconds a user would otherwise watch in silence: a caller's Notices is told what is happening
and why, and keeps the seconds of each wait for the run's time line.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

ASSETS_GLOB = "libtt-tt-metal-runtime-assets-*"


def _quiet(_: str) -> None:
    pass


@dataclass
class Notices:
    """What a caller is told while the plugin's pieces are made or waited for: a line saying what and
    why (`say`), and the seconds of each kind of wait (`seconds`: 'lock wait', 'plugin assets'),
    which a run puts on its time line."""

    say: Callable[[str], None] = _quiet
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - start


def system_tmpdir() -> Path:
    return Path(os.environ.get("TMPDIR", "/tmp"))


def find_assets(tmp: Path) -> Path | None:
    found = sorted(p for p in tmp.glob(ASSETS_GLOB) if p.is_dir())
    return found[-1] if found else None


def private_tmpdir(path: Path, assets: Path) -> Path:
    """A fresh $TMPDIR for one compiler process, linking to the shared assets."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    (path / assets.name).symlink_to(assets, target_is_directory=True)
    return path


@contextmanager
def startup_lock(notices: Notices | None = None) -> Iterator[None]:
    """Held while a process loads the plugin: one at a time per machine. A wait for another process
    holding it is said and timed ('lock wait')."""
    lock = FileLock(system_tmpdir() / "opbyop-plugin-startup.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        notices = notices or Notices()
        notices.say("waiting for another process to start jax-tt-plugin (its start-up is one at a time per machine)")
        with notices.timed("lock wait"):
            lock.acquire()
    try:
        yield
    finally:
        lock.release()
