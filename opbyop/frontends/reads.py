"""What a model's export read, recorded while it runs and checked before a kept export is used.

As ccache's direct mode keeps a compile by its source and the headers it read, an export is kept by
everything it read: the files it opened and the source of every module it imported from outside
the installed packages (the factory's module, a helper it imports, opbyop's own frontend), each by
its content's digest, and the version of every installed package it imported. Python's audit hooks
see each file opened (`open` events, from builtins.open, io.open_code and os.open); what was imported
before the recorder started (a forkserver's preloads) is found in sys.modules at the end.

What is not recorded: the Python installation's own files and the installed packages' files (their
versions stand for them), files opened to be written, pseudo-files (/proc, /sys, /dev), bytecode
caches (the source beside them is recorded), and the folders a caller names (the export's own
result folder, the cache that keeps exports). A C or Rust extension that reads a file without
Python's `open` is not seen: a package's data read that way is covered by its version only.

opbyop's own sources are recorded by their place in its package (`opbyop:frontends/loader.py`), not
by their absolute path: another checkout or installation of opbyop whose files are the same uses the
export, and one whose files differ exports again.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any, Iterable, Sequence

import opbyop
from opbyop.digests import ABSENT, FileDigests

_PSEUDO = ("/proc/", "/sys/", "/dev/")
OWN = "opbyop:"  # how a record names a source of opbyop's own package
_PACKAGE = os.path.join(os.path.realpath(os.path.dirname(opbyop.__file__)), "")


@dataclass(frozen=True)
class ExportReads:
    """Everything an export read: files by content digest, installed packages by version."""

    python: str  # the interpreter's version: bytecode, pickles and the frontends follow it
    files: dict[str, str] = field(default_factory=dict)  # recorded_name(path) -> sha256 (ABSENT: was not there)
    packages: dict[str, str] = field(default_factory=dict)  # distribution -> version

    def changed(self, digests: FileDigests, installed: dict[str, str]) -> str | None:
        """Why this export is out of date (the first difference found), or None when every file and
        package is as it was. `installed`: installed_versions() of the process that checks."""
        if self.python != python_version():
            return f"Python is {python_version()}, the export was made under {self.python}"
        for name, version in sorted(self.packages.items()):
            now = installed.get(name)
            if now != version:
                return f"package {name} is {now or 'not installed'} (the export used {version})"
        for name, digest in sorted(self.files.items()):
            now = digests.of(file_path(name))
            if now != digest:
                how = "appeared" if digest == ABSENT else "is gone" if now == ABSENT else "changed"
                return f"{shown_name(name)} {how} since the export read it"
        return None


def recorded_name(real: str) -> str:
    """How a record names the file at `real` (a resolved path): opbyop's own by its place in the package."""
    return OWN + real[len(_PACKAGE):] if real.startswith(_PACKAGE) else real


def file_path(name: str) -> str:
    """The file a recorded name stands for in this process: opbyop's own in the opbyop it imported."""
    return _PACKAGE + name[len(OWN):] if name.startswith(OWN) else name


def shown_name(name: str) -> str:
    """A recorded name as a message shows it: opbyop's own as a path inside the package."""
    return "opbyop/" + name[len(OWN):] if name.startswith(OWN) else name


def python_version() -> str:
    return sys.version.split()[0]


def installed_roots() -> tuple[str, ...]:
    """The Python installation's folders and the installed packages' (site-packages): what a
    version, not a digest, stands for."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= {sys.base_prefix + "/lib", sys.base_exec_prefix + "/lib"}
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


def installed_versions() -> dict[str, str]:
    """Every installed distribution's version, by normalised name, from the names of the
    `*.dist-info` folders on sys.path (one listing per folder: no package is imported or read)."""
    versions: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[: -len(".dist-info")].partition("-")
                versions.setdefault(normalised(dist), version)
    return versions


def normalised(name: str) -> str:
    """A distribution's name as packaging compares them (PEP 503: `Jax_TT-plugin` is `jax-tt-plugin`)."""
    return "".join("-" if c in "_." else c for c in name.lower())


class Recorder:
    """Records the files a process opens for reading from the moment it starts (an audit hook: it
    stays installed for the life of the process, and records only while `recording`); reads()
    gives what the export read. One export per process: an export's child."""

    def __init__(self, ignored: Sequence[Path] = ()):
        """`ignored`: folders whose files are not the export's input (its result folder, the cache)."""
        self.skipped = installed_roots() + tuple(os.path.join(os.path.realpath(p), "") for p in ignored)
        self.opened: set[str] = set()
        self.recording = True
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or not self.recording:
            return
        path, mode, flags = args
        if isinstance(path, int) or path is None:  # an open file descriptor: its path was seen when opened
            return
        if mode is not None and any(c in mode for c in "wax+"):
            return
        if mode is None and isinstance(flags, int) and flags & os.O_ACCMODE != os.O_RDONLY:
            return
        self.opened.add(os.fsdecode(path))

    def reads(self) -> ExportReads:
        """What was read so far: the files opened and the imported modules' sources (by digest), and
        the installed packages imported (by version)."""
        self.recording = False
        digests = FileDigests()
        names = {n for n in map(self._recorded, self.opened | set(module_files(sys.modules.values()))) if n}
        return ExportReads(python=python_version(), files={n: digests.of(file_path(n)) for n in sorted(names)},
                           packages=imported_packages(sys.modules))

    def _recorded(self, path: str) -> str | None:
        """The file's name as recorded, or None when it is not the export's input."""
        real = os.path.realpath(path)
        if real.startswith(self.skipped) or real.startswith(_PSEUDO) or "__pycache__" in real:
            return None
        if os.path.isdir(real):
            return None
        return recorded_name(real)


def module_files(modules: Iterable[Any]) -> list[str]:
    """The source file of each imported module that names one by its full path."""
    out = []
    for module in list(modules):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            out.append(path)
    return out


def imported_packages(modules: dict[str, Any]) -> dict[str, str]:
    """distribution -> version of each installed distribution a module of `modules` came from."""
    # jax imports every PJRT plugin it finds (`jax_plugins`) as it starts; an export runs on XLA:CPU,
    # so the plugin (the compiler under test) is not its input: a new compiler build exports nothing again
    tops = {name.partition(".")[0] for name in list(modules)} - {"jax_plugins"}
    installed = installed_versions()
    out: dict[str, str] = {}
    for top, dists in packages_distributions().items():
        if top in tops:
            for dist in dists:
                version = installed.get(normalised(dist))
                if version is not None:
                    out[normalised(dist)] = version
    return out
