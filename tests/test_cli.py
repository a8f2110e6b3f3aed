"""The `opbyop` command, run as a user runs it (a subprocess with its own workspace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core_fixtures import DATA

pytestmark = pytest.mark.slow

OPBYOP = [sys.executable, "-m", "opbyop.cli.main"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-home")


def opbyop(home: Path, *args: str, expect: int = 0) -> str:
    env = {**os.environ, "OPBYOP_HOME": str(home), "COLUMNS": "200"}
    env.pop("JAX_PLATFORMS", None)  # the command decides for itself
    proc = subprocess.run([*OPBYOP, *args], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_models_lists_the_zoo(home):
    out = opbyop(home, "models")
    for name in ("mlp", "resnet50", "bert-base", "gpt2", "llama", "vit", "jax-mlp"):
        assert name in out


def test_split_prints_counts_and_emits_json(home):
    out = opbyop(home, "split", "mlp")
    assert "stablehlo.dot_general" in out and "unique" in out and "torch.linear" in out
    records = json.loads(opbyop(home, "split", "mlp", "--json"))
    assert len(records) == len({(r["model"], r["position"]) for r in records}) > 50
    assert all(r["signature"] and r["module_text"] for r in records)


def test_bad_input_gets_a_clear_error(home, tmp_path):
    out = opbyop(home, "split", "resnet51", expect=2)
    assert "unknown model 'resnet51'" in out and "resnet50" in out
    bad = tmp_path / "bad.mlir"
    bad.write_text("module {\n  func.func @main( {\n}\n")
    assert "line 2" in opbyop(home, "split", str(bad), expect=2)


def test_compile_groups_failures_and_repro_replays_one(home):
    out = opbyop(home, "compile", str(DATA / "cholesky.mlir"), str(DATA / "custom_call_with_callee.mlir"),
                 "--no-whole")
    assert "compile_failed" in out and "failed to legalize operation 'stablehlo.cholesky'" in out
    assert "most blocking ops first" in out
    (record,) = json.loads(opbyop(home, "split", str(DATA / "cholesky.mlir"), "--json"))
    signature = record["signature"][:12]
    assert signature in out  # the blockers table names it
    repro = opbyop(home, "repro", signature, "--compile-only", expect=1)
    assert "STABLEHLO" in repro and "failed" in repro and "shlo:" in repro and "module:" in repro
    assert "failed to legalize" in repro
    by_position = opbyop(home, "repro", "cholesky:0", "--compile-only", expect=1)
    assert "stablehlo.cholesky" in by_position


def test_repro_with_passes_lists_the_pipeline_and_names_the_failing_pass(home):
    (record,) = json.loads(opbyop(home, "split", str(DATA / "cholesky.mlir"), "--json"))
    opbyop(home, "compile", str(DATA / "cholesky.mlir"), "--no-whole")
    out = opbyop(home, "repro", record["signature"][:12], "--compile-only", "--passes", expect=1)
    assert "failed pass: convert-stablehlo-to-ttir (ConvertStableHLOToTTIR, failed)" in out
    assert "last pass that succeeded: cpu-hoist-non-lowerable-shlo-ops" in out
    assert "ttcore-wrap-device-module" in out and "vhlo-legalize-to-stablehlo" in out  # the pipeline, in order
    ir = Path(out.split("IR before it: ")[1].split()[0])
    assert "stablehlo.cholesky" in ir.read_text()


def test_run_reports_both_views(home):
    out = opbyop(home, "run", "jax-mlp")
    assert "GOLDEN" in out and "success" in out and "whole model beside op by op" in out


def test_run_stores_what_it_shows_under_a_run_id_that_sql_queries(home):
    out = opbyop(home, "run", "mlp")
    run_id = out.split("stored as run ")[1].split(";")[0]
    assert f"opbyop sql \"select * from results where run_id = '{run_id}'\"" in out
    rows = json.loads(opbyop(home, "sql", f"select status, op_name from results where run_id = '{run_id}'", "-f", "json"))
    shown = [line for line in out.splitlines() if "│ GOLDEN │ success" in line]
    assert len(rows) == len(shown) > 50 and {r["status"] for r in rows} == {"success"}
    (run,) = json.loads(opbyop(home, "sql", f"select status, models from runs where run_id = '{run_id}'", "-f", "json"))
    assert run["status"] == "completed" and "mlp" in str(run["models"])
    (model,) = json.loads(opbyop(home, "sql", f"select model from models where run_id = '{run_id}'", "-f", "json"))
    assert model["model"] == "mlp"


def test_image_build_info_run(home, tmp_path):
    image = tmp_path / "mlp.zip"
    opbyop(home, "image", "build", "mlp", "-o", str(image))
    assert "arch blackhole" in opbyop(home, "image", "info", str(image))
    assert "output 0: shape (4, 10)" in opbyop(home, "image", "run", str(image))
    image.write_bytes(image.read_bytes()[:200])
    assert "corrupt or truncated" in opbyop(home, "image", "info", str(image), expect=2)


def test_compile_with_pass_timing_prints_the_slowest_compiler_passes(home):
    out = opbyop(home, "compile", str(DATA / "testdata_abs_bf16.mlir"), "--no-whole", "--pass-timing")
    assert "slowest compiler passes" in out and "ConvertStableHLOToTTIR" in out
