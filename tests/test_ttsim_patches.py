"""opbyop's patches to ttsim (opbyop/device/ttsim/patches): the series applies cleanly to ttsim
v1.10.0's source, each patch says what it implements, and every ttnn op it unblocks runs on the
patched ttsim and matches XLA:CPU.

The series tests read the ttsim source `make ttsim` builds (TTSIM_SRC, default
`../shared/third_party/ttsim` beside the checkout). The op tests need ttsim built with the series
and ttnn's interpreter (`make ttsim`); without them they fail with the backend's own words, never
skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ttsim_ops import corpus, kinds_of, only_op
from opbyop.device.ttsim.series import PATCHES, SeriesError, apply, carried, label, patches, simulator_name
from opbyop.records import Status, TtsimOutcome

CHECKOUT = Path(__file__).resolve().parents[1]
HEADER_FIELDS = {
    "Instruction": r"SFP[A-Z0-9]+ \(.+\)",
    "ISA page": r"tenstorrent/tt-isa-documentation [\w/]+\.md\b.*",
    "ttsim issue": r"tenstorrent/ttsim#\d+ .+",
    "Unblocks": r".+",
}
T = "tensor<32x32xf32>"


def ttsim_source() -> Path:
    source = Path(os.environ.get("TTSIM_SRC", CHECKOUT.parent / "shared" / "third_party" / "ttsim"))
    if not (source / "make.py").is_file():
        pytest.fail(f"no ttsim source at {source}: set TTSIM_SRC to ttsim v1.10.0's source tree")
    return source


def writable_copy(tmp_path: Path) -> Path:
    tree = tmp_path / "src"  # as `make ttsim` keeps it beside its library
    shutil.copytree(ttsim_source(), tree, ignore=shutil.ignore_patterns("_out"))
    for path in [tree, *tree.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return tree


def header(patch: Path) -> dict[str, str]:
    """The `Field: value` lines before a patch's diff."""
    text = patch.read_text().split("\ndiff --git ", 1)[0]
    return dict(re.findall(r"^([A-Za-z ]+): (.+)$", text, re.MULTILINE))


def test_the_series_applies_to_ttsim_v1_10_0_exactly(tmp_path):
    """Each patch in the order `series` lists it: no fuzz, no offset (made against this very tree)."""
    tree = writable_copy(tmp_path)
    assert (tree / "SOURCE").read_text().startswith("v1.10.0 ")
    for patch in patches():
        done = subprocess.run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "-d", str(tree), "-i", str(patch)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.name}: {done.stdout}{done.stderr}"
        assert not re.search(r"offset|fuzz", done.stdout, re.IGNORECASE), f"{patch.name}: {done.stdout}"


def test_a_tree_is_patched_once_and_names_its_series(tmp_path):
    tree = writable_copy(tmp_path)
    assert carried(tree) is None
    assert apply(tree) == apply(tree) == label() == carried(tree)  # the second apply leaves it as it is
    assert label() == f"opbyop.{len(patches())}.{label().rsplit('.', 1)[1]}"
    library = tree.parent / "libttsim_bh.so"
    library.write_bytes(b"\x7fELF")
    assert simulator_name(library) == f"ttsim v1.10.0+{label()}"
    (tree / "OPBYOP_PATCHES").write_text("opbyop.1.abcdef\n")
    with pytest.raises(SeriesError, match="carries another patch series"):
        apply(tree)


def test_a_library_without_its_source_tree_is_named_by_its_digest(tmp_path):
    library = tmp_path / "libttsim_bh.so"
    library.write_bytes(b"\x7fELF release")
    assert re.fullmatch(r"ttsim libttsim_bh\.so sha256:[0-9a-f]{12}", simulator_name(library))


def test_every_patch_names_its_instruction_isa_page_ttsim_issue_and_ops():
    listed = patches()
    assert listed and sorted(p.name for p in PATCHES.glob("*.patch")) == sorted(p.name for p in listed)
    for patch in listed:
        assert re.fullmatch(r"\d{4}-[a-z0-9-]+\.patch", patch.name)
        fields = header(patch)
        for field, pattern in HEADER_FIELDS.items():
            assert re.fullmatch(pattern, fields.get(field, "")), f"{patch.name}: no `{field}:` line like {pattern}"


def test_make_ttsim_builds_the_patched_ttsim(ttsim_ready):
    assert ttsim_ready.simulator == f"ttsim v1.10.0+{label()}", \
        f"{ttsim_ready.simulator} is not this checkout's series: run `make ttsim` (it rebuilds when a patch changes)"


def unary(op: str) -> str:
    return f"""func.func @main(%a: {T}) -> {T} {{
  %0 = stablehlo.{op} %a : {T}
  return %0 : {T}
}}
"""


def binary(op: str, dtype: str = "f32") -> str:
    t = f"tensor<32x32x{dtype}>"
    return f"""func.func @main(%a: {t}, %b: {t}) -> {t} {{
  %0 = stablehlo.{op} %a, %b : {t}
  return %0 : {t}
}}
"""


RELU = f"""func.func @main(%a: {T}) -> {T} {{
  %z = stablehlo.constant dense<0.0> : {T}
  %0 = stablehlo.maximum %a, %z : {T}
  return %0 : {T}
}}
"""
SORT = f"""func.func @main(%a: {T}) -> {T} {{
  %0 = "stablehlo.sort"(%a) ({{
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %c = stablehlo.compare GT, %x, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }}) {{dimension = 1 : i64, is_stable = true}} : ({T}) -> {T}
  return %0 : {T}
}}
"""



def on_patched_ttsim(tmp_path, workspace, worker, on_ttsim, ttsim_ready, text: str, kind: str):
    """The op run on ttsim, where v1.10.0 stopped it: it ran, on this series' ttsim, as the kind under test."""
    result = worker.analyze(only_op(tmp_path, workspace, text), on_ttsim, timeout=600)
    assert kind in kinds_of(workspace, result)  # the compiler emitted the kind the patch unblocks
    assert result.ttsim is not None and result.ttsim.outcome is TtsimOutcome.RAN, result.ttsim.message
    assert result.ttsim.simulator == ttsim_ready.simulator
    return result


@pytest.mark.slow
@pytest.mark.parametrize("text, kind", [
    (RELU, "ttnn.relu"),  # SFPGT against LReg[9]
    (unary("logistic"), "ttnn.sigmoid"),
    (unary("sqrt"), "ttnn.sqrt"),
    (unary("rsqrt"), "ttnn.rsqrt"),
    (unary("exponential_minus_one"), "ttnn.expm1"),
    (binary("power"), "ttnn.pow_tensor"),
    (binary("divide", "bf16"), "ttnn.divide"),  # f32 divides ran before: the bf16 kernel compares
    (binary("atan2"), "ttnn.atan2"),
    (corpus("batch_norm_inference-f32-2x3x4x4-args.mlir"), "ttnn.batch_norm_inference"),
    (corpus("batch_norm_training-f32-2x3x4x4-args.mlir"), "ttnn.batch_norm_training"),
    (unary("log"), "ttnn.log"),  # SFPLE against LReg[9]
    (unary("log_plus_one"), "ttnn.log1p"),
    (SORT, "ttnn.sort"),  # SFPSWAP's argmin/argmax on LReg[4]
], ids=["relu", "sigmoid", "sqrt", "rsqrt", "expm1", "pow", "divide", "atan2", "batch_norm_inference",
        "batch_norm_training", "log", "log1p", "sort"])
def test_an_op_v1_10_0_refused_runs_on_the_patched_ttsim_and_matches_xla(tmp_path, workspace, worker, on_ttsim,
                                                                         ttsim_ready, text, kind):
    result = on_patched_ttsim(tmp_path, workspace, worker, on_ttsim, ttsim_ready, text, kind)
    assert result.status is Status.SUCCESS and result.golden.passed, result.message


@pytest.mark.slow
def test_remainder_runs_on_the_patched_ttsim_and_computes_what_its_program_says(tmp_path, workspace, worker,
                                                                                on_ttsim, ttsim_ready):
    """ttnn.remainder takes the divisor's sign (Python's %), StableHLO's remainder the dividend's (C's
    fmod): on a negative dividend the compiled program itself differs from XLA. ttsim computes that
    program as opbyop's reading of it does, so the verdict is the compiler's, not the chip's."""
    result = on_patched_ttsim(tmp_path, workspace, worker, on_ttsim, ttsim_ready, binary("remainder"),
                              "ttnn.remainder")
    assert result.status is Status.MISCOMPILED, result.message
    assert result.ttsim.agreement in ("bit_equal", "within_ulps"), result.ttsim


@pytest.mark.slow
def test_a_limit_the_series_leaves_is_named_with_its_instruction(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    """ttsim v1.10.0 calls unpacking a uint32 tile to the source registers undefined (tt-metal's integer max
    does it): the op is ttsim's limit, its message ttsim's own words naming the instruction."""
    result = worker.analyze(only_op(tmp_path, workspace, corpus("reduce-max-ui32-3x50-args.mlir")), on_ttsim,
                            timeout=600)
    assert result.status is Status.SIMULATOR_LIMIT, result.message
    assert "ERROR: UndefinedBehavior: tensix_unpacr: " in result.ttsim.message
    assert result.ttsim.op is not None and result.ttsim.simulator == ttsim_ready.simulator
