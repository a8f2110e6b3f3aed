"""The compiler under test: any build of the TT PJRT plugin, named by a spec, prepared once per machine.

A spec names a build (CompilerSpec.parse says the forms): the plugin installed beside opbyop, a
release on the package registry (`jax-tt-plugin==0.1.2`, or `newest`, resolved when it is
prepared), a wheel file, or a PJRT plugin library a user built (`pjrt_plugin_tt.so`, or the package
directory holding it). A build is one shared library, and every release's Python package only
registers it with JAX by path (opbyop.compiler.pjrt), so opbyop loads it by path, in its own
environment, beside the jaxlib that also runs the golden reference: every compiler is judged
against the same XLA:CPU. A build made for an older jaxlib can die while it loads (jax-tt-plugin
0.1.0 under jaxlib 0.10.2: SIGSEGV creating its client; it runs under jax 0.7.1): such a build gets
an environment of its own with the jax it names (`SPEC,jax==0.7.1`, or else the lowest jax its
package requires), where it only compiles (a compile server, opbyop.compiler.plugin), and says so
in its identity.

Preparing reads the library's identity (its digest, the tt-metal commit it carries), unpacks its
runtime assets into its own folder (two builds' assets must never mix), and starts it once to have
it describe a p150 (or to check the p150 descriptor opbyop ships for its release): that start is the
proof that it loads. Everything is kept under the compiler's folder (OPBYOP_CACHE_DIR/compilers/),
so a second preparation reads one file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import mmap
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field

from opbyop.atomic import write_text
from opbyop.boards import BOARDS
from opbyop.compiler import pjrt
from opbyop.compiler.assets import Notices, find_assets, private_tmpdir, startup_lock
from opbyop.compiler_spec import DEFAULT_PACKAGE, INSTALLED, NEWEST, SPEC_FORMS, CompilerSpec, SpecKind
from opbyop.compiler.flatbuf import FlatbufferError
from opbyop.compiler.ttsys import decode
from opbyop.config import config_dir
from opbyop.digests import file_digest
from opbyop.environment import environment
from opbyop.errors import CompilerError
from opbyop.records import CompilerIdentity

PJRT_SYMBOL = b"GetPjrtApi"  # every PJRT plugin library exports it
CLUSTER_DIR = "tt_metal/third_party/umd/tests/cluster_descriptor_examples"
# the board a build describes to prove it loads: one Blackhole chip, whose firmware every build can build
PROBE_BOARD = "p150"
_PROBE_TIMEOUT = 600.0
_SHA40 = re.compile(rb"\x00([0-9a-f]{8})\x00+git_sha_short\x00")  # tt-metal's build info, beside its short sha


class Compiler(BaseModel):
    """A prepared build: what is loaded, how, and who it is. Sent to every worker that compiles."""

    model_config = ConfigDict(frozen=True)

    identity: CompilerIdentity
    library: Path  # the PJRT plugin library
    home: Path  # its folder: assets, system descriptors, its own environment
    python: Path | None = None  # the interpreter of its own environment; None: opbyop's (loaded in-process)
    environment: dict[str, str] = Field(default_factory=dict)  # what the build needs besides (TT_METAL_HOME)

    @property
    def key(self) -> str:
        return self.identity.key

    @property
    def label(self) -> str:
        return self.identity.label

    @property
    def in_process(self) -> bool:
        """Loaded by opbyop's own workers (True), or compiling in a server of its own environment."""
        return self.python is None

    @property
    def tmp_root(self) -> Path:
        """Where its runtime assets are unpacked ($TMPDIR of the process that unpacked them)."""
        return self.home / "tmp"

    @property
    def descriptors(self) -> Path:
        """Its system descriptors (their schema is the build's)."""
        return self.home / "system_descs"

    def command(self, verb: str, *args: str) -> list[str]:
        """A process running opbyop.compiler.pjrt's `verb` on this build."""
        return [str(self.python or sys.executable), pjrt.__file__, str(self.library), verb, *args]

    def process_environment(self, tmp: Path, **extra: str) -> dict[str, str]:
        """The environment of a process that loads this build with $TMPDIR `tmp`."""
        env = {**os.environ, **self.environment, "TMPDIR": str(tmp), "JAX_PLATFORMS": pjrt.PLATFORM, **extra}
        for name in ("TT_COMPILE_ONLY_SYSTEM_DESC", "TT_METAL_MOCK_CLUSTER_DESC_PATH"):
            if name not in extra:
                env.pop(name, None)
        return env


def compilers_dir() -> Path:
    return environment().cache_dir / "compilers"


# ------------------------------------------------------------------------------- locating a build

class _Located(BaseModel):
    library: Path
    package: str = ""
    version: str = ""
    requires_jax: str = ""  # the lowest jax its package names (">=0.7.1" -> 0.7.1)
    environment: dict[str, str] = Field(default_factory=dict)


def installed_library() -> _Located:
    """The plugin installed beside opbyop."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise CompilerError(f"no {DEFAULT_PACKAGE} is installed beside opbyop",
                            f"install it (pip install {DEFAULT_PACKAGE}), or name a compiler: {SPEC_FORMS}") from None
    libraries = [Path(str(dist.locate_file(f))) for f in dist.files or [] if str(f).endswith(".so")]
    found = [lib for lib in libraries if _is_pjrt(lib)]
    if not found:
        raise CompilerError(f"the installed {DEFAULT_PACKAGE} {dist.version} holds no PJRT plugin library",
                            f"reinstall it (pip install --force-reinstall {DEFAULT_PACKAGE}=={dist.version})")
    return _Located(library=found[0], package=DEFAULT_PACKAGE, version=dist.version,
                    requires_jax=_lowest_jax(dist.requires or []))


def _is_pjrt(path: Path) -> bool:
    """An ELF shared library that exports the PJRT entry point."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return data.find(PJRT_SYMBOL) >= 0
    except (OSError, ValueError):
        return False


def elf_extent(path: Path) -> int | None:
    """The bytes an ELF file's own headers say it holds: the end of its section header table and of
    every segment's bytes in the file (the ELF specification's e_shoff, e_phoff, p_offset + p_filesz);
    None for a file that is not ELF or too short to hold its file header."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
                return None
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            if wide:
                phoff, shoff = struct.unpack_from(order + "QQ", head, 0x20)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 0x36)
            else:
                phoff, shoff = struct.unpack_from(order + "II", head, 0x1C)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(order + "HHHH", head, 0x2A)
            end = max(phoff + phnum * phentsize, shoff + shnum * shentsize)
            f.seek(phoff)
            table = f.read(phnum * phentsize)
    except OSError:
        return None
    for i in range(len(table) // phentsize if phentsize else 0):
        entry = table[i * phentsize:(i + 1) * phentsize]
        if wide:  # Elf64_Phdr: p_offset at 8, p_filesz at 32
            (offset,), (filesz,) = struct.unpack_from(order + "Q", entry, 8), struct.unpack_from(order + "Q", entry, 32)
        else:  # Elf32_Phdr: p_offset at 4, p_filesz at 16
            (offset,), (filesz,) = struct.unpack_from(order + "I", entry, 4), struct.unpack_from(order + "I", entry, 16)
        end = max(end, offset + filesz)
    return end


def refuse_cut_short(library: Path) -> None:
    """A library whose file ends before its ELF headers say it does (a copy or download stopped
    part way) is refused as that: loading one dies with SIGBUS, which would read as a build made for
    another jax."""
    extent = elf_extent(library)
    size = library.stat().st_size
    if extent is not None and size < extent:
        raise CompilerError(f"{library} is cut short: it holds {size:,} bytes, and its ELF headers point to byte "
                            f"{extent:,} ({size / extent:.0%} of the library is there)",
                            "copy the library again, whole (a copy or download that stopped part way, or a full "
                            "disk, leaves a file like this one), and check its size against the original's")


def _lowest_jax(requires: list[str]) -> str:
    for line in requires:
        match = re.match(r"^jax\s*(?:\[[^]]*\])?\s*(?:>=|==|~=)\s*([0-9][0-9a-z.]*)", line.split(";")[0].strip())
        if match:
            return match.group(1)
    return ""


def _metadata(text: str) -> tuple[str, str, str]:
    """(name, version, lowest jax) of a METADATA file."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), []).append(value.strip())
    return (fields.get("Name", [""])[0], fields.get("Version", [""])[0], _lowest_jax(fields.get("Requires-Dist", [])))


def _from_wheel(wheel: Path, notices: Notices) -> _Located:
    """The PJRT library of a wheel, unpacked once (by the wheel's digest) under the compilers' folder."""
    digest = _digest(wheel)
    into = compilers_dir() / "wheels" / digest[:16]
    if not (into / ".unpacked").exists():
        notices.say(f"compiler: unpacking {wheel.name} ({wheel.stat().st_size / 1e6:.0f} MB)")
        try:
            with zipfile.ZipFile(wheel) as archive:
                shutil.rmtree(into, ignore_errors=True)
                archive.extractall(into)
        except (zipfile.BadZipFile, OSError) as e:
            shutil.rmtree(into, ignore_errors=True)
            raise CompilerError(f"{wheel} is not a readable wheel: {e}", "download it again, or name a release") from None
        write_text(into / ".unpacked", str(wheel))
    libraries = sorted(p for p in into.rglob("*.so") if _is_pjrt(p))
    if not libraries:
        raise CompilerError(f"{wheel.name} holds no PJRT plugin library (no .so exporting GetPjrtApi)",
                            "name the wheel of a PJRT plugin build (jax-tt-plugin, pjrt-plugin-tt)")
    name, version, jax = "", "", ""
    for metadata in into.glob("*.dist-info/METADATA"):
        name, version, jax = _metadata(metadata.read_text(errors="replace"))
    return _Located(library=libraries[0], package=name, version=version, requires_jax=jax)


def _from_path(path: Path, spec: CompilerSpec) -> _Located:
    """A user's library, or the package directory holding one (tt-xla's pjrt_plugin_tt with its tt-metal)."""
    if spec.kind is SpecKind.PACKAGE:
        candidates = sorted(p for pattern in ("*.so", "*/*.so", "jax_plugins/*/*.so") for p in path.glob(pattern))
        libraries = [p for p in candidates if _is_pjrt(p)]
        if not libraries:
            raise CompilerError(f"{path} holds no PJRT plugin library (no .so exporting GetPjrtApi at its top, "
                                "one folder down, or in jax_plugins/*/)", "name the library itself, or its package directory")
        library = libraries[0]
    else:
        library = path
        if not _is_pjrt(library):
            raise CompilerError(f"{library} is not a PJRT plugin library (not an ELF shared library exporting GetPjrtApi)",
                                "name the plugin's .so (jax-tt-plugin's libtt.so, tt-xla's pjrt_plugin_tt.so)")
    package, version, jax = _owning_distribution(library)
    env = {}
    tt_metal = library.parent / "tt-metal"
    if tt_metal.is_dir() and "TT_METAL_HOME" not in os.environ:
        env["TT_METAL_HOME"] = str(tt_metal)  # tt-xla's own package points tt-metal there before it registers
    return _Located(library=library, package=package, version=version, requires_jax=jax, environment=env)


def _owning_distribution(library: Path) -> tuple[str, str, str]:
    """(name, version, lowest jax) of an installed distribution whose RECORD lists `library`, if any."""
    for parent in list(library.parents)[:3]:
        for record in parent.glob("*.dist-info/RECORD"):
            try:
                rows = record.read_text(errors="replace")
            except OSError:
                continue
            relative = os.path.relpath(library, parent)
            if relative in rows:
                metadata = record.with_name("METADATA")
                return _metadata(metadata.read_text(errors="replace")) if metadata.exists() else ("", "", "")
    return "", "", ""


def _pip(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess:
    """pip of this interpreter, with the machine's pip configuration (its indexes and find-links)."""
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=timeout)


def release_versions(package: str) -> list[str]:
    """The registry's releases of `package`, newest first."""
    try:
        done = _pip("index", "versions", package, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompilerError(f"could not ask the package registry for {package}'s releases: {e}",
                            "check the network and pip's index settings") from None
    match = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or not match:
        tail = _last_line(done.stderr or done.stdout)
        raise CompilerError(f"the package registry has no releases of {package}" + (f": {tail}" if tail else ""),
                            f"check the name (the TT PJRT plugin is {DEFAULT_PACKAGE}) and pip's index settings")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def _download(package: str, version: str, notices: Notices) -> Path:
    """The wheel of release `package==version`, downloaded once into the compilers' folder."""
    into = compilers_dir() / "downloads" / f"{package}-{version}"
    into.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(into.with_name(f".{into.name}.lock"))):  # two runs preparing one release download it once
        found = sorted(into.glob("*.whl"))
        return found[0] if found else _fetch(package, version, into, notices)


def _fetch(package: str, version: str, into: Path, notices: Notices) -> Path:
    """pip's download of the release's wheel into folder `into` (made whole, or not at all)."""
    notices.say(f"compiler: downloading {package}=={version} from the package registry (first use on this machine)")
    partial = into.with_name(f".{into.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        done = _pip("download", f"{package}=={version}", "--no-deps", "--only-binary", ":all:", "-d", str(partial))
    except (OSError, subprocess.SubprocessError) as e:
        raise CompilerError(f"downloading {package}=={version} failed: {e}", "check the network and pip's settings") from None
    wheels = sorted(partial.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        shutil.rmtree(partial, ignore_errors=True)
        known = _known_versions(package)
        raise CompilerError(f"no release {package}=={version} on the package registry"
                            + (f" (it has {', '.join(known)})" if known else f": {_last_line(done.stderr)}"),
                            f"pick one of those, or `{NEWEST}`" if known else "check the name and pip's index settings")
    shutil.rmtree(into, ignore_errors=True)
    partial.rename(into)
    return into / wheels[0].name


def _known_versions(package: str) -> list[str]:
    try:
        return release_versions(package)
    except CompilerError:
        return []


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip() and not line.startswith("WARNING")]
    return lines[-1] if lines else ""


def locate(spec: CompilerSpec, notices: Notices) -> _Located:
    """The build `spec` names, fetched where it must be (`newest` is asked of the registry every time)."""
    if spec.kind is SpecKind.INSTALLED:
        return installed_library()
    if spec.kind is SpecKind.NEWEST:
        newest = release_versions(spec.target)[0]
        notices.say(f"compiler: the newest {spec.target} on the package registry is {newest}")
        return _from_wheel(_download(spec.target, newest, notices), notices)
    if spec.kind is SpecKind.RELEASE:
        return _from_wheel(_download(spec.target, spec.version, notices), notices)
    if spec.kind is SpecKind.WHEEL:
        return _from_wheel(Path(spec.target), notices)
    return _from_path(Path(spec.target), spec)


# ------------------------------------------------------------------------------------- identity

def _digest(path: Path) -> str:
    """sha256 of a file, remembered by its path, size and modification time (a 140 MB library: 0.4 s)."""
    stat = path.stat()
    memo = compilers_dir() / "digests" / hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    stamp = f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"
    if memo.exists():
        remembered = memo.read_text().split()
        if len(remembered) == 2 and remembered[0] == stamp:
            return remembered[1]
    digest = file_digest(path)
    write_text(memo, f"{stamp} {digest}")
    return digest


def tt_metal_commit(library: Path) -> str:
    """The tt-metal commit a build carries in its build info (beside `git_sha_short`), when it does."""
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        short = _SHA40.search(data)
        if short is None:
            return ""
        full = re.search(rb"\x00(" + short.group(1) + rb"[0-9a-f]{32})\x00", data)
        return (full or short).group(1).decode()


def _jax_version() -> str:
    return importlib.metadata.version("jaxlib")


# ---------------------------------------------------------------------------------- preparation

def prepare(spec: CompilerSpec | str | None = None, notices: Notices | None = None) -> Compiler:
    """The build `spec` names, ready to compile with: located, identified, its assets unpacked, and
    proven to load (once per machine: a second call reads its record)."""
    spec = spec if isinstance(spec, CompilerSpec) else CompilerSpec.parse(spec)
    notices = notices or Notices()
    located = locate(spec, notices)
    refuse_cut_short(located.library)
    digest = _digest(located.library)
    home = compilers_dir() / digest[:16]
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home / ".prepare.lock")):
        record = home / (f"compiler-jax-{spec.jax}.json" if spec.jax else "compiler.json")
        if record.exists():
            compiler = Compiler.model_validate_json(record.read_text())
            return _as_asked(compiler, spec)
        with notices.timed("compiler"):
            compiler = _first_preparation(spec, located, digest, home, notices)
        write_text(record, compiler.model_dump_json(indent=1))
    return _as_asked(compiler, spec)


def _as_asked(compiler: Compiler, spec: CompilerSpec) -> Compiler:
    """The prepared build, named as this spec named it (the same library may be asked for many ways:
    `newest` stays `newest`, and its version says what it resolved to)."""
    return compiler.model_copy(update={"identity": compiler.identity.model_copy(update={"spec": spec.text})})


def portable_spec(identity: CompilerIdentity) -> str:
    """A spec that names the same build on another machine: its release, or what was given (a path);
    the installed plugin is the other machine's installed one (the caller checks it is the same build)."""
    if identity.spec == INSTALLED:
        return INSTALLED
    if identity.package and identity.version and not Path(identity.spec.split(",")[0]).exists():
        spec = f"{identity.package}=={identity.version}"
    else:
        spec = identity.spec.split(" (")[0]
    needs_jax = identity.jax and identity.jax != _jax_version()
    return f"{spec},jax=={identity.jax}" if needs_jax and ",jax==" not in spec else spec


def installed(notices: Notices | None = None) -> Compiler:
    """The plugin installed beside opbyop, prepared."""
    return prepare(CompilerSpec.parse(INSTALLED), notices)


def _first_preparation(spec: CompilerSpec, located: _Located, digest: str, home: Path, notices: Notices) -> Compiler:
    name = f"{located.package} {located.version}".strip() or located.library.name
    notices.say(f"compiler: preparing {name} ({digest[:12]}) for the first time on this machine: its runtime is "
                "unpacked and it is started once to describe a p150 (the proof that it loads)")
    identity = CompilerIdentity(spec=spec.text, package=located.package, version=located.version,
                                library_sha256=digest, tt_metal_commit=tt_metal_commit(located.library))
    compiler = Compiler(identity=identity, library=located.library, home=home, environment=located.environment)
    if spec.jax is None:
        compiler = compiler.model_copy(update={"identity": identity.model_copy(update={"jax": _jax_version()})})
        death = _probe(compiler, notices)
        if death is None:
            return _finished(compiler)
        jax = located.requires_jax
        if not jax:
            raise CompilerError(f"{name} died loading under jax {_jax_version()} ({death}), and nothing names the jax "
                                "it was built for", f"name it: --compiler '{spec.text},jax==VERSION'")
        notices.say(f"compiler: {name} died loading under opbyop's jax {_jax_version()} ({death}); it gets an "
                    f"environment of its own with jax {jax}, the lowest its package requires")
    else:
        jax = spec.jax
    compiler = compiler.model_copy(update={"python": own_environment(home, jax, notices),
                                           "identity": identity.model_copy(update={"jax": jax})})
    death = _probe(compiler, notices)
    if death is not None:
        raise CompilerError(f"{name} died loading under jax {jax} too ({death})",
                            f"name the jax it was built for: --compiler '{spec.text.split(',')[0]},jax==VERSION'")
    return _finished(compiler)


def _finished(compiler: Compiler) -> Compiler:
    """The identity's parts that preparing revealed: the ttsim its tt-metal names, the tt-mlir commit
    its descriptor carries."""
    assets = find_assets(compiler.tmp_root)
    ttsim = (assets / "tt_metal" / "ttsim-version") if assets else None
    updates = {"ttsim_version": ttsim.read_text().strip() if ttsim and ttsim.exists() else ""}
    probe = compiler.descriptors / f"{PROBE_BOARD}.ttsys"
    if probe.exists():
        try:
            commit = decode(probe.read_bytes()).ttmlir_git_hash
        except (FlatbufferError, ValueError, struct.error) as e:
            raise CompilerError(f"opbyop cannot read the system descriptors {compiler.label} writes ({probe}: {e}): "
                                "their SystemDesc schema is not one opbyop.compiler.ttsys knows",
                                "teach opbyop.compiler.ttsys the build's schema (tt-mlir's system_desc.fbs of its "
                                "commit), or use an older build") from None
        updates["tt_mlir_commit"] = "" if commit in ("", "unknown") else commit
    return compiler.model_copy(update={"identity": compiler.identity.model_copy(update=updates)})


def own_environment(home: Path, jax: str, notices: Notices) -> Path:
    """A virtual environment with jax and jaxlib `jax` only (a build's compile server needs no more),
    made once with pip and the machine's pip settings."""
    folder = home / f"env-jax-{jax}"
    python = folder / "bin" / "python"
    if (folder / ".ready").exists():
        return python
    notices.say(f"compiler: making an environment with jax {jax} in {folder} (once; about 15 s)")
    shutil.rmtree(folder, ignore_errors=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(folder)], capture_output=True, text=True)
    if made.returncode == 0:
        made = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               f"jax=={jax}", f"jaxlib=={jax}"], capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise CompilerError(f"could not make an environment with jax {jax}: {_last_line(made.stderr or made.stdout)}",
                            "check that the registry has jax and jaxlib of that version (pip index versions jaxlib)")
    write_text(folder / ".ready", jax)
    return python


def _probe(compiler: Compiler, notices: Notices) -> str | None:
    """Start the build once and have it describe a p150: None when it did (the descriptor kept in its
    folder), else how its process died. A build that starts but cannot describe a p150 (no Blackhole
    firmware toolchain, say) still loads: that is None too, and its descriptors come from elsewhere."""
    try:
        assets = unpack_assets(compiler, notices)
    except BuildDied as e:
        return e.death
    shipped = shipped_descriptor(compiler.identity, PROBE_BOARD)
    out = compiler.descriptors / f"{PROBE_BOARD}.ttsys"
    out.parent.mkdir(parents=True, exist_ok=True)
    if shipped is not None and shipped.is_file():  # what this release writes, shipped: checked by compiling (no firmware build)
        ran = run_verb(compiler, "check", str(compiler.home / f".probe-export-{os.getpid()}"),
                       TT_COMPILE_ONLY_SYSTEM_DESC=str(shipped))
        shutil.rmtree(compiler.home / f".probe-export-{os.getpid()}", ignore_errors=True)
        if ran.ok:
            shutil.copyfile(shipped, out)
        if ran.died or ran.ok:
            return ran.died
    written = compiler.home / f".{PROBE_BOARD}-{os.getpid()}.ttsys"
    ran = run_verb(compiler, "describe", str(written), TT_METAL_MOCK_CLUSTER_DESC_PATH=str(assets / CLUSTER_DIR / BOARDS[PROBE_BOARD].cluster_yaml))
    if ran.ok and written.exists():
        os.replace(written, out)
    written.unlink(missing_ok=True)
    return ran.died


class Ran(BaseModel):
    """How one pjrt.py verb on a build ended."""

    died: str | None = None  # how its process died (a signal's name, or no answer in time)
    ok: bool = False  # it exited 0
    output: str = ""  # what it printed (stderr, then stdout)

    def last_words(self, lines: int = 2) -> str:
        """Its error lines, last first shown last (a process that died mid-way leaves only progress)."""
        kept = [line.strip() for line in self.output.splitlines() if line.strip()]
        errors = [line for line in kept if any(w in line.lower() for w in ("error", "fatal", "abort"))]
        return " | ".join(errors[-lines:])


def run_verb(compiler: Compiler, verb: str, *args: str, timeout: float = _PROBE_TIMEOUT, **env: str) -> Ran:
    """One pjrt.py verb on the build, in a private $TMPDIR linked to its assets (the plugin deletes
    the descriptor it writes there when its process exits); one plugin start at a time per machine."""
    work = compiler.home / f".run-{os.getpid()}-{verb}"
    tmp = private_tmpdir(work, unpack_assets(compiler))
    try:
        with startup_lock():
            done = subprocess.run(compiler.command(verb, *args), env=compiler.process_environment(tmp, **env),
                                  capture_output=True, text=True, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        return Ran(died=f"no answer within {timeout:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    output = (done.stderr or "") + (done.stdout or "")
    if done.returncode < 0:
        return Ran(died=_signal_name(-done.returncode), output=output)
    return Ran(ok=done.returncode == 0, output=output)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def shipped_descriptor(identity: CompilerIdentity, board: str) -> Path | None:
    """Where opbyop ships the descriptor a release writes for the mock board `board` (it saves the
    firmware build of a mock start); None for a build no release names."""
    if not identity.package or not identity.version:
        return None
    return config_dir() / "system_descs" / f"{identity.package}-{identity.version}" / f"{board}.ttsys"


def unpack_assets(compiler: Compiler, notices: Notices | None = None) -> Path:
    """The build's tt-metal runtime assets, unpacked once into its own folder (each build's assets
    are its own: another release's kernels and firmware must never be picked up)."""
    found = find_assets(compiler.tmp_root)
    if found is not None:
        return found
    notices = notices or Notices()
    notices.say(f"compiler: {compiler.label} unpacks its runtime (about 400 MB) into {compiler.tmp_root}")
    compiler.tmp_root.mkdir(parents=True, exist_ok=True)
    with startup_lock(notices), notices.timed("plugin assets"):
        if find_assets(compiler.tmp_root) is None:
            done = subprocess.run(compiler.command("unpack"), env=compiler.process_environment(compiler.tmp_root),
                                  capture_output=True, text=True, timeout=_PROBE_TIMEOUT, cwd=compiler.tmp_root)
            if done.returncode < 0:
                raise BuildDied(_signal_name(-done.returncode), compiler, done.stderr)
    found = find_assets(compiler.tmp_root)
    if found is None:
        raise CompilerError(f"{compiler.label} loaded but unpacked no tt-metal runtime into {compiler.tmp_root}",
                            "check the disk has room (about 400 MB), and that the library is a TT PJRT plugin "
                            "(jax-tt-plugin's libtt.so, tt-xla's pjrt_plugin_tt.so)")
    return found


class BuildDied(CompilerError):
    """A build whose process died while it loaded (a signal): often a build made for another jaxlib."""

    def __init__(self, death: str, compiler: Compiler, output: str = ""):
        self.death = death
        last = Ran(output=output).last_words()
        super().__init__(f"{compiler.label} died loading under jax {compiler.identity.jax} ({death})"
                         + (f": {last}" if last else ""),
                         f"name the jax it was built for: --compiler '{portable_spec(compiler.identity).split(',')[0]},"
                         "jax==VERSION'")
