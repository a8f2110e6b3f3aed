"""Hostile and careless input to `opbyop split`, `compile`, `run`, `system-desc`: every case refused
with a message naming the problem and the fix, a non-zero exit code and no traceback.

The CLI runs in this process (typer's runner, the real commands on real files); nothing here
compiles, except the descriptor check, which is the real compiler in a child process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbyop.cli.main import build_app

USER_MODELS = '''
import torch
from torch import nn

def raises():
    raise ValueError("boom in the user's factory")

not_callable = 42

def returns_int():
    return 3

def linear():
    torch.manual_seed(0)
    return nn.Linear(4, 2)

class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1

def data_dependent():
    return DataDependent()

class Fft(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).abs()

def fft():
    return Fft()

def jax_fn(x):
    import jax.numpy as jnp
    return jnp.tanh(x) * 2

def jax_factory():
    return jax_fn

def jax_with_inputs():
    import numpy as np
    return jax_fn, [np.ones((2, 3), np.float32)]
'''


@pytest.fixture(scope="module")
def user_models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user-models")
    (root / "hostile_models.py").write_text(USER_MODELS)
    return root


@pytest.fixture
def opbyop(user_models, monkeypatch, tmp_path):
    """Run `opbyop ARGS` in this process; returns (exit code, everything it printed)."""
    monkeypatch.syspath_prepend(str(user_models))
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str]:
        result = runner.invoke(build_app(), [str(a) for a in args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a traceback is a failure of this test
        return result.exit_code, result.output

    return run


def refused(outcome: tuple[int, str], *expected: str, code: int = 2) -> str:
    exit_code, out = outcome
    assert exit_code == code, out
    assert "Traceback" not in out and "error:" in out and "fix:" in out, out
    for text in expected:
        assert text in out, out
    return out


# -- MLIR that would kill the parser -----------------------------------------------------------
def test_deeply_nested_text_is_refused_before_parsing(opbyop, tmp_path):
    tuples = tmp_path / "tuples.mlir"
    tuples.write_text("func.func @main(%a: " + "tuple<" * 50_000 + "f32" + ">" * 50_000 + ") {\n return\n}\n")
    modules = tmp_path / "modules.mlir"
    modules.write_text("module {\n" * 200_000 + "}\n" * 200_000)
    refused(opbyop("split", tuples), "50,001 levels deep", "refuses more than 1,000")
    refused(opbyop("split", modules), "200,000 levels deep")


@pytest.mark.slow
def test_deep_bytecode_is_read_in_a_child_and_refused(opbyop, tmp_path):
    from opbyop.ir.context import make_context

    text = "module {\n" * 1_500 + "}\n" * 1_500  # deep enough to refuse, shallow enough to write here
    with make_context() as ctx:
        from jaxlib.mlir import ir

        module = ir.Module.parse(text, ctx)
        path = tmp_path / "deep.mlirbc"
        with open(path, "wb") as f:
            module.operation.write_bytecode(f)
    refused(opbyop("split", path), "levels deep")
    junk = tmp_path / "junk.mlirbc"
    junk.write_bytes(b"ML\xefR" + bytes(range(256)) * 4)
    refused(opbyop("split", junk), "junk.mlirbc")


def test_a_directory_named_like_a_module_is_refused(opbyop, tmp_path):
    (tmp_path / "x.mlir").mkdir()
    refused(opbyop("split", tmp_path / "x.mlir"), "is a directory")


# -- text is text --------------------------------------------------------------------------------
def test_file_names_with_markup_are_printed_literally(opbyop, tmp_path):
    bad = tmp_path / "in" / "[" / "x].mlir"
    bad.parent.mkdir(parents=True)
    bad.write_text("module {\n  func.func @main( {\n}\n")
    refused(opbyop("split", bad), "in/[/x].mlir is not valid MLIR", "line 2")
    good = tmp_path / "[red]hi :factory:.mlir"
    good.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %0 = stablehlo.abs %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    code, out = opbyop("split", good)
    assert code == 0 and "[red]hi :factory:" in out, out


# -- careless factories and inputs -----------------------------------------------------------------
@pytest.mark.parametrize("factory, inputs, expected", [
    ("raises", ["1x4xf32"], ["raised ValueError: boom in the user's factory", "hostile_models.py:"]),
    ("not_callable", ["1x4xf32"], ["is int 42, not callable"]),
    ("returns_int", [], ["returned int, not an nn.Module or a function"]),
    ("linear", ["1x5xf32"], ["cannot run on the example inputs (1x5xf32)", "shapes cannot be multiplied"]),
    ("linear", ["1x4xi64"], ["cannot run on the example inputs (1x4xi64)", "same dtype"]),
    ("jax_fn", [], ["has no example inputs", "return (model, example inputs)"]),
    ("jax_fn", ["2x3xf32", "4xf32"], ["JAX could not trace", "2 were given"]),
    ("nosuchattr", [], ["has no attribute 'nosuchattr'"]),
])
def test_careless_factories_get_clear_errors(opbyop, factory, inputs, expected):
    args = [arg for spec in inputs for arg in ("--input", spec)]
    refused(opbyop("split", f"hostile_models:{factory}", *args), *expected)


def test_a_branch_on_a_tensor_value_is_traced_the_example_inputs_way_and_said_so(opbyop):
    code, out = opbyop("split", "hostile_models:data_dependent", "--input", "1x4xf32")
    assert code == 0 and "0 failed to split" in out and "real-tensor propagation" in out, out


def test_an_op_torch_mlir_cannot_lower_is_cut_out_and_the_rest_of_the_model_splits(opbyop):
    code, out = opbyop("split", "hostile_models:fft", "--input", "1x8xf32")
    assert code == 0 and "aten.fft_fft.default" in out and "stablehlo.abs" in out and "0 failed to split" in out, out
    assert "1 framework ops the frontend could not lower" in out and "failed to legalize" in out


@pytest.mark.parametrize("factory, inputs", [("jax_fn", ["2x3xf32"]), ("jax_factory", ["2x3xf32"]),
                                             ("jax_with_inputs", [])])
def test_both_forms_of_a_jax_entry_work(opbyop, factory, inputs):
    args = [arg for spec in inputs for arg in ("--input", spec)]
    code, out = opbyop("split", f"hostile_models:{factory}", *args)
    assert code == 0 and "stablehlo.tanh" in out and "0 failed to split" in out, out


@pytest.mark.parametrize("spec", ["1x4xq7", "1x4xi64:abc", "1x4xf32:9", "x4xf32", "1x4", "",
                                  "99999999x99999999xf32", "1x4xi64:0"])
def test_bad_input_specs_are_refused(opbyop, spec):
    refused(opbyop("split", "hostile_models:linear", "--input", spec), "input spec")


# -- options the CLI itself refuses ---------------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["compile", "mlp", "--math-fidelity", "bogus"], "'lofi', 'hifi2', 'hifi3', 'hifi4'"),
    (["run", "mlp", "--timeout", "0"], "finite number of seconds above 0"),
    (["compile", "mlp", "--timeout", "-1"], "finite number of seconds above 0"),
    (["compile", "mlp", "--timeout", "nan"], "finite number of seconds above 0"),
    (["repro", "abcdef", "--timeout", "inf"], "finite number of seconds above 0"),
    (["analyze", "mlp", "--workers", "0"], "--workers"),
    (["analyze", "mlp", "--timeout", "nan"], "finite number of seconds above 0"),
    (["image", "run", "x.zip", "--iterations", "0"], "--iterations"),
])
def test_out_of_range_options_are_refused_by_the_cli(opbyop, args, expected):
    code, out = opbyop(*args)
    words = " ".join(out.replace("│", " ").split())  # typer's error box wraps at 80 columns
    assert code == 2 and expected in words and "Traceback" not in out, out


def test_compile_exits_non_zero_when_no_model_loads(opbyop):
    refused(opbyop("compile", "nosuchmodel", "hostile_models:returns_int"), "unknown model 'nosuchmodel'",
            "returned int", "no model could be loaded")


# -- descriptors ------------------------------------------------------------------------------------
def test_random_and_directory_descriptors_are_refused(opbyop, tmp_path):
    import os

    random_desc = tmp_path / "random.ttsys"
    random_desc.write_bytes(os.urandom(672))
    refused(opbyop("system-desc", random_desc), "is not a system descriptor")
    (tmp_path / "dir.ttsys").mkdir()
    refused(opbyop("system-desc", tmp_path / "dir.ttsys"), "is a directory")


@pytest.mark.slow
def test_a_descriptor_with_a_corrupt_body_is_refused_before_any_op(opbyop, p150, tmp_path):
    from opbyop.compiler.flatbuf import read_root

    data = bytearray(p150.path.read_bytes())
    keep = data.index(read_root(bytes(data)).schema_hash.encode())
    for i in range(64, len(data)):  # header, root table and schema hash intact, the chips' bytes not
        if not keep - 8 <= i < keep + 68:
            data[i] = (data[i] * 31 + i * 7 + 13) % 256
    corrupt = tmp_path / "corrupt.ttsys"
    corrupt.write_bytes(bytes(data))
    refused(opbyop("system-desc", corrupt), "passes the header checks, but the compiler", "opbyop system-desc p150")
    good = tmp_path / "mine.ttsys"
    good.write_bytes(p150.path.read_bytes())
    code, out = opbyop("system-desc", good)
    assert code == 0 and "mine: " in out, out


def test_input_spec_parser_round_trips():
    from opbyop.cli.app import parse_input_spec

    spec = parse_input_spec("1x32xi64:1000")
    assert (spec.shape, spec.dtype, spec.high) == ([1, 32], "int64", 1000)
    assert parse_input_spec("f32").shape == []  # a scalar
