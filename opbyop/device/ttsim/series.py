"""opbyop's patch series for ttsim, and the name of the ttsim a library was built as.

ttsim refuses some SFPU instructions where Tenstorrent's ISA documentation defines them (a compare
against a constant register, SFPSWAP's argmin/argmax on most register pairs): `patches/` holds
opbyop's own fixes, as unified diffs against ttsim's source tree, applied in the order `patches/series`
lists them. Each patch's header names the instruction, the ISA page it implements, the ttsim issue of
the same class and the ttnn ops it unblocks.

Both builds read the series here: `make ttsim` runs this file as a script (`python3 series.py apply
TREE`, standard library only) and opbyop.device.ttsim.install imports it. A patched tree carries a
marker file naming its series, so a tree is never patched twice and a library built from it is named
for what it is: `ttsim v1.10.0+opbyop.4.1a2b3c` (ttsim's version, the number of patches, a digest of
the series).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

PATCHES = Path(__file__).resolve().with_name("patches")
MARKER = "OPBYOP_PATCHES"  # in a patched tree: the series' label, then its patches, a line each


class SeriesError(Exception):
    """The series cannot be applied to a tree: why, and what to do."""


def patches(folder: Path = PATCHES) -> list[Path]:
    """The series' patch files, in the order `series` lists them (blank lines and # comments ignored)."""
    listed = [line.split("#", 1)[0].strip() for line in (folder / "series").read_text().splitlines()]
    found = [folder / name for name in listed if name]
    missing = [p.name for p in found if not p.is_file()]
    if missing:
        raise SeriesError(f"{folder / 'series'} lists patches that are not there: {', '.join(missing)}; "
                          "restore them or drop them from the series")
    return found


def label(folder: Path = PATCHES) -> str:
    """`opbyop.<count>.<digest>`: what a tree patched with the series carries (semver build metadata)."""
    files = patches(folder)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"opbyop.{len(files)}.{digest.hexdigest()[:6]}"


def carried(tree: Path) -> str | None:
    """The label of the series a ttsim tree was patched with; None for an unpatched tree."""
    marker = tree / MARKER
    return marker.read_text().splitlines()[0].strip() if marker.is_file() else None


def apply(tree: Path, folder: Path = PATCHES) -> str:
    """Patch a writable copy of ttsim's source with the series (`patch -p1`, no fuzz); its label.

    A tree that already carries this series is left as it is; one that carries another is refused
    (patches do not stack on another series: start again from an unpatched copy)."""
    wanted, found = label(folder), carried(tree)
    if found == wanted:
        return wanted
    if found is not None:
        raise SeriesError(f"the ttsim tree {tree} carries another patch series ({found}, not {wanted}): copy an "
                          "unpatched ttsim source there again (`make ttsim` does) and apply the series to it")
    if shutil.which("patch") is None:
        raise SeriesError("the `patch` tool is not installed: install it (Debian: `apt-get install patch`)")
    for path in patches(folder):
        done = subprocess.run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch",
                               "-d", str(tree), "-i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SeriesError(f"{path.name} does not apply to {tree}: {(done.stdout + done.stderr).strip()[-1500:]}; "
                              "the series is made for ttsim v1.10.0's source: use that tree (or rebase the patch)")
    (tree / MARKER).write_text("\n".join([wanted, *(p.name for p in patches(folder))]) + "\n")
    return wanted


def version(tree: Path) -> str:
    """ttsim's version of a source tree: its SOURCE file's first word (`v1.10.0`), else git's tag."""
    source = tree / "SOURCE"
    if source.is_file():
        words = source.read_text().split()
        if words and words[0].startswith("v"):
            return words[0]
    described = subprocess.run(["git", "-C", str(tree), "describe", "--tags", "--always"], capture_output=True,
                               text=True)
    return described.stdout.strip() if described.returncode == 0 and described.stdout.strip() else "(version unknown)"


def simulator_name(library: Path) -> str:
    """Which ttsim a library is: `ttsim v1.10.0+opbyop.4.1a2b3c` where it was built from the ttsim tree
    kept beside it (`src/`, as `make ttsim` and opbyop's own builds keep it), else the file and its
    digest (a release binary says no version of its own)."""
    tree = library.parent / "src"
    if (tree / "make.py").is_file():
        patched = carried(tree)
        return f"ttsim {version(tree)}" + (f"+{patched}" if patched else "")
    digest = hashlib.sha256(library.read_bytes()).hexdigest()[:12]
    return f"ttsim {library.name} sha256:{digest}"


def main(argv: list[str]) -> int:
    """`apply TREE`: patch a ttsim tree with the series; `label`: the series' label."""
    if len(argv) == 2 and argv[0] == "apply":
        try:
            print(f"ttsim {version(Path(argv[1]))}+{apply(Path(argv[1]))}")
        except SeriesError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if argv == ["label"]:
        print(label())
        return 0
    print("usage: series.py apply TREE | series.py label", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
