"""The compiler under test as an input: builds named by a spec, prepared once, each with its identity,
descriptors and verdicts of its own; bad builds refused with the fix, nothing of a run lost."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from core_fixtures import DATA
from opbyop.compiler.assets import Notices
from opbyop.compiler.builds import Compiler, installed, installed_library, portable_spec, prepare
from opbyop.compiler_spec import CompilerSpec, SpecKind
from opbyop.compiler.system_desc import resolve
from opbyop.config import AnalysisConfig, AnalysisSettings, load_zoo
from opbyop.errors import CompilerError, SystemDescError
from opbyop.pipeline import prepare as split_models
from opbyop.records import Status
from opbyop.worker.process import OpWorker

RELEASE = "jax-tt-plugin==0.1.2"  # refuses f64 constants that the installed 0.1.3 compiles (tests/data/f64_scale.mlir)
OLD_JAXLIB_RELEASE = "jax-tt-plugin==0.1.0"  # dies loading under jaxlib 0.10.2, runs under jax 0.7.1


def test_a_spec_names_the_installed_plugin_a_release_the_newest_a_wheel_or_a_library(tmp_path: Path) -> None:
    assert CompilerSpec.parse(None).kind is SpecKind.INSTALLED
    release = CompilerSpec.parse("jax-tt-plugin==0.1.2")
    assert (release.kind, release.target, release.version, release.jax) == (SpecKind.RELEASE, "jax-tt-plugin", "0.1.2", None)
    assert CompilerSpec.parse("newest").target == "jax-tt-plugin"
    assert CompilerSpec.parse("newest:pjrt-plugin-tt").target == "pjrt-plugin-tt"
    assert CompilerSpec.parse("jax-tt-plugin==0.1.0,jax==0.7.1").jax == "0.7.1"
    wheel, library = tmp_path / "x-1-py3-none-any.whl", tmp_path / "pjrt_plugin_tt.so"
    wheel.write_bytes(b""), library.write_bytes(b"")
    assert CompilerSpec.parse(str(wheel)).kind is SpecKind.WHEEL
    assert CompilerSpec.parse(str(library)).kind is SpecKind.LIBRARY
    assert CompilerSpec.parse(str(tmp_path)).kind is SpecKind.PACKAGE


@pytest.mark.parametrize("text, words", [
    ("no/such/plugin.so", "no file at no/such/plugin.so"),
    ("missing.whl", "no wheel file at"),
    ("jax-tt-plugin==0.1.2,jaxlib", "is not 'jax==VERSION'"),
    ("installed,jax==0.7.1", "runs with opbyop's own jax"),
])
def test_a_spec_that_names_no_build_is_refused_with_the_forms(text: str, words: str) -> None:
    with pytest.raises(CompilerError, match=words) as refused:
        CompilerSpec.parse(text)
    assert refused.value.fix


def test_a_configuration_naming_no_build_is_refused_when_it_is_read() -> None:
    with pytest.raises(CompilerError, match="neither a release, a wheel, a library nor a directory"):
        AnalysisConfig(compilers=["installed", "tonights build"])
    assert [c.compilers for c in AnalysisConfig(compilers=["installed", RELEASE, "installed"]).per_compiler()] == \
        [["installed"], [RELEASE]]


def test_the_installed_plugin_is_prepared_once_and_named_by_its_library(tmp_path: Path) -> None:
    compiler = installed()
    started = time.monotonic()
    again = installed()
    assert time.monotonic() - started < 2.0  # a second preparation reads its record
    assert again == compiler
    identity = compiler.identity
    assert identity.package == "jax-tt-plugin" and identity.version
    assert identity.library_sha256 == hashlib.sha256(compiler.library.read_bytes()).hexdigest()
    assert identity.jax == __import__("jaxlib").__version__ and compiler.in_process
    assert len(identity.key) == 16 and identity.key in compiler.label or identity.library_sha256[:12] in compiler.label
    # a local build saying the same version is another build: its key differs
    local = identity.model_copy(update={"library_sha256": "0" * 64})
    assert local.key != identity.key and local.version == identity.version
    assert portable_spec(identity) == "installed"


def test_a_wheel_that_holds_no_pjrt_plugin_is_refused_with_the_fix(tmp_path: Path) -> None:
    wheel = tmp_path / "not_a_plugin-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("not_a_plugin/__init__.py", "")
        archive.writestr("not_a_plugin-1.0.dist-info/METADATA", "Name: not-a-plugin\nVersion: 1.0\n")
    with pytest.raises(CompilerError, match="holds no PJRT plugin library") as refused:
        prepare(str(wheel))
    assert "jax-tt-plugin" in refused.value.fix


def test_a_library_that_is_not_a_pjrt_plugin_is_refused_with_the_fix(tmp_path: Path) -> None:
    text = tmp_path / "libtt.so"
    text.write_text("not a library")
    with pytest.raises(CompilerError, match="is not a PJRT plugin library"):
        prepare(str(text))
    other = tmp_path / "libm.so"  # an ELF shared library, but no PJRT entry point
    shutil.copy(next(p for p in Path("/lib/x86_64-linux-gnu").glob("libm.so.6")), other)
    with pytest.raises(CompilerError, match="GetPjrtApi"):
        prepare(str(other))


def test_a_plugin_library_cut_short_is_refused_as_cut_short_not_as_built_for_another_jax(tmp_path: Path) -> None:
    """A copy of the installed plugin's library stopped at 20 MB passes as a PJRT library (its symbols
    come first) but dies loading with SIGBUS: its ELF headers point past its end, and that is what is said."""
    whole = installed_library().library
    cut = tmp_path / "libtt.so"
    with open(whole, "rb") as source, open(cut, "wb") as copy:
        copy.write(source.read(20 * 1024 * 1024))
    with pytest.raises(CompilerError, match=r"is cut short: it holds 20,971,520 bytes, and its ELF headers point "
                       rf"to byte {whole.stat().st_size:,}") as refused:
        prepare(str(cut), Notices())
    assert "copy the library again, whole" in refused.value.fix and "died loading" not in str(refused.value)


def test_a_compiler_path_that_does_not_exist_is_refused_in_opbyops_words_alone(tmp_path: Path) -> None:
    """pydantic's "Value error," framing and its errors.pydantic.dev link are not opbyop's words."""
    done = subprocess.run([str(Path(sys.executable).with_name("opbyop")), "run", "mlp", "--no-whole",
                           "--compiler", str(tmp_path / "missing" / "pjrt_plugin_tt.so")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OPBYOP_HOME": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: compiler '{tmp_path / 'missing' / 'pjrt_plugin_tt.so'}' is neither"), \
        done.stderr
    assert "\n  fix: give one of: installed" in done.stderr
    assert "Value error" not in done.stderr and "pydantic" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_library_that_dies_loading_is_refused_with_how_it_died_and_the_fix(tmp_path: Path) -> None:
    source = tmp_path / "crash.c"
    source.write_text('#include <signal.h>\nvoid *GetPjrtApi(void) { raise(SIGSEGV); return 0; }\n')
    library = tmp_path / "pjrt_plugin_crash.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    with pytest.raises(CompilerError, match=r"died loading under jax .* \(SIGSEGV\)") as refused:
        prepare(str(library), Notices())
    assert f"{library},jax==VERSION" in refused.value.fix  # nothing names the jax it was made for: say how


def test_a_descriptor_opbyop_cannot_read_for_a_build_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A build whose SystemDesc schema opbyop.compiler.ttsys does not know: no Wormhole descriptor is
    derived from its p150 (it would be garbage), and the error says what to do instead."""
    real = installed()
    home = tmp_path / "build"
    own = home / "system_descs" / "p150.ttsys"
    own.parent.mkdir(parents=True)
    p150 = resolve("p150")
    data = bytearray(p150.path.read_bytes().replace(p150.schema_hash.encode(), b"a" * 64))  # another schema
    data[152:200] = b"\xff" * 48  # a header the checks accept, a body nothing can read
    own.write_bytes(bytes(data))
    other = Compiler(identity=real.identity.model_copy(update={"library_sha256": "1" * 64, "version": "9.9.9"}),
                     library=real.library, home=home)
    with pytest.raises(SystemDescError) as refused:
        resolve("n150", check=False, compiler=other)
    assert "cannot read the system descriptors" in refused.value.problem and "--chip PATH" in refused.value.fix


def _f64_scale_ops():
    return split_models([str(DATA / "f64_scale.mlir")], load_zoo(), 0).unique


@pytest.mark.slow
def test_a_release_from_the_registry_gets_its_own_descriptors_and_verdicts_beside_the_installed_plugin(tmp_path: Path):
    release, here = prepare(RELEASE), installed()
    assert release.identity.version == "0.1.2" and release.key != here.key and release.in_process
    assert release.identity.tt_metal_commit and release.identity.ttsim_version  # what the build says of itself
    p150 = resolve("p150", compiler=release)
    assert p150.schema_hash != resolve("p150").schema_hash  # its own schema, its own descriptor
    n150 = resolve("n150", compiler=release)  # the vendored Wormhole chip under this build's header, checked
    assert n150.schema_hash == p150.schema_hash and n150.path.parent == release.descriptors
    ops = _f64_scale_ops()
    verdicts = {}
    for compiler in (release, here):
        desc = resolve("p150", compiler=compiler)
        with OpWorker(desc.path, tmp_path, chip="p150", name=f"t-{compiler.key[:6]}", compiler=compiler) as worker:
            assert worker.ready.compiler == compiler.key
            verdicts[compiler.key] = [worker.analyze(op, AnalysisSettings(), 120) for op in ops]
    assert {r.status for r in verdicts[here.key]} == {Status.SUCCESS}
    old = verdicts[release.key]
    assert {r.status for r in old} == {Status.COMPILE_FAILED}
    assert all("failed to legalize operation 'stablehlo.constant'" in r.message for r in old)
    assert {r.compiler for r in old} == {release.key} and {r.compiler for r in verdicts[here.key]} == {here.key}


@pytest.mark.slow
def test_a_build_made_for_an_older_jaxlib_compiles_in_an_environment_of_its_own(tmp_path: Path) -> None:
    said: list[str] = []
    old = prepare(OLD_JAXLIB_RELEASE, Notices(say=said.append))
    assert not old.in_process and old.identity.jax == "0.7.1"  # the lowest jax its package requires
    assert Path(old.python).is_file()
    if said:  # its first preparation says why (on this machine it may have been prepared before)
        assert any("died loading under opbyop's jax" in line and "SIGSEGV" in line for line in said), said
    assert portable_spec(old.identity) == f"{OLD_JAXLIB_RELEASE},jax==0.7.1"
    desc = resolve("p150", compiler=old)
    ops = _f64_scale_ops()
    with OpWorker(desc.path, tmp_path, chip="p150", name="old", compiler=old) as worker:
        results = [worker.analyze(op, AnalysisSettings(), 120) for op in ops]
    # compiled by 0.1.0 in its server; simulated and checked against opbyop's own XLA:CPU here
    assert {r.compiler for r in results} == {old.key}
    assert all(r.compile is not None and r.status in (Status.SUCCESS, Status.COMPILE_FAILED) for r in results)


@pytest.mark.slow
def test_opbyop_run_with_a_compiler_says_which_and_stores_its_identity(tmp_path: Path) -> None:
    env = {**os.environ, "OPBYOP_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("JAX_PLATFORMS", None)
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(DATA / "f64_scale.mlir"), "--no-whole",
                           "--compiler", RELEASE], capture_output=True, text=True, env=env, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "compiler: jax-tt-plugin 0.1.2" in out and "compile_failed" in out
    run_id = out.split("stored as run ")[1].split(";")[0]
    query = (f"select compiler_spec, compiler_version, compiler_key, plugin_version from runs where run_id = "
             f"'{run_id}'")
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "sql", query, "-f", "json"], capture_output=True,
                          text=True, env=env, timeout=300)
    (run,) = json.loads(proc.stdout)
    assert run["compiler_spec"] == RELEASE and run["compiler_version"] == run["plugin_version"] == "0.1.2"
    assert run["compiler_key"] == prepare(RELEASE).key
