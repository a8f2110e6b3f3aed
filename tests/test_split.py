"""Splitting: every op of @main becomes a verified single-op module, with provenance and a signature."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import pytest
import torch
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

from core_fixtures import DATA
from opbyop.errors import ModuleError, UnknownModelError
from opbyop.frontends.loader import load_model, load_stablehlo_file
from opbyop.frontends.torch_export import _lowered, export_torch, from_numpy, to_numpy
from opbyop.ir.context import make_context
from opbyop.ir.dedupe import dedupe
from opbyop.ir.parse import parse_module
from opbyop.ir.split import split_module
from opbyop.records import OperandKind


@pytest.fixture(scope="module")
def cnn_split(cnn_graph):
    return split_module(cnn_graph.module_text, "cnn")


def test_every_op_becomes_a_verified_module(cnn_split):
    ctx = make_context()
    assert cnn_split.ops and not cnn_split.failed
    for record in cnn_split.ops:
        module = parse_module(record.module_text, ctx, record.op_name)  # raises if it does not verify
        body = list(module.body.operations[0].regions[0].blocks[0].operations)
        assert body[-2].operation.name == record.op_name  # the op itself, right before the return
        assert len(record.signature) == 64


def test_torch_mlir_arith_constants_are_rewritten(cnn_split):
    # batch norm's epsilon arrives as an f64 arith.constant from torch-mlir, which the plugin refuses
    assert cnn_split.arith_constants_rewritten > 0
    assert not any("arith.constant" in r.module_text for r in cnn_split.ops)


def test_constants_feeding_an_op_stay_constants(cnn_split):
    reduces = [r for r in cnn_split.ops if r.op_name == "stablehlo.reduce"]
    assert reduces
    for r in reduces:
        init = [o for o in r.operands if o.index == 1][0]
        assert init.kind is OperandKind.CONSTANT
        assert "stablehlo.constant" in r.module_text
        assert len(r.inputs) == 1  # only the reduced tensor is an argument


def test_provenance_names_framework_op_module_and_source_line(cnn_split):
    convs = [r for r in cnn_split.ops if r.op_name == "stablehlo.convolution"]
    assert {c.provenance.module_path for c in convs} == {"conv1", "conv2"}
    for c in convs:
        assert c.provenance.framework_op == "torch.conv2d"
        assert c.provenance.aten_op.startswith("aten.convolution")
        assert c.provenance.source.file.endswith("opbyop/frontends/models/small.py")
        assert "fw=torch.conv2d" in c.module_text  # the location travels with the module


def test_signatures_ignore_ssa_names_and_locations(cnn_graph, cnn_split):
    again = split_module(cnn_graph.module_text.replace('"x.py"', '"y.py"'), "renamed")
    assert [r.signature for r in again.ops] == [r.signature for r in cnn_split.ops]
    # the two batch-norm-then-relu blocks use differently named values but some ops are equal
    assert len({r.signature for r in cnn_split.ops}) < len(cnn_split.ops)


def test_dedupe_keeps_every_model_an_op_came_from(mlp_graph):
    a = split_module(mlp_graph.module_text, "model-a").ops
    b = split_module(mlp_graph.module_text, "model-b").ops
    unique = dedupe(a + b)
    assert len(unique) == len({r.signature for r in a})
    for op in unique:
        assert op.models == ["model-a", "model-b"]
        assert len(op.occurrences) == 2 * sum(1 for r in a if r.signature == op.signature)


def test_captured_values_become_arguments_and_calls_are_inlined():
    split = split_module((DATA / "while_and_call.mlir").read_text(), "while")
    names = [r.op_name for r in split.ops]
    assert "func.call" not in names and "stablehlo.multiply" in names  # the callee's op, inlined
    loop = next(r for r in split.ops if r.op_name == "stablehlo.while")
    kinds = [o.kind for o in loop.operands]
    assert kinds == [OperandKind.CONSTANT, OperandKind.ARGUMENT, OperandKind.CAPTURED]  # counter, acc, %b
    assert len(loop.inputs) == 2


def test_functions_an_op_refers_to_travel_with_it_and_dangling_ones_fail_only_that_op():
    split = split_module((DATA / "custom_call_with_callee.mlir").read_text(), "callee")
    helper_call, missing_call = [r for r in split.ops if r.op_name == "stablehlo.custom_call"]
    assert helper_call.ok and "func.func private @helper" in helper_call.module_text
    assert split.failed == [missing_call]
    assert "refers to @missing" in missing_call.split_error
    assert [r.op_name for r in split.ops if r.ok] == ["stablehlo.abs", "stablehlo.custom_call", "stablehlo.negate"]


def test_bytecode_files_are_read(tmp_path):
    ctx = make_context()
    with ctx:
        module = parse_module((DATA / "cholesky.mlir").read_text(), ctx)
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
    path = tmp_path / "cholesky.mlirbc"
    path.write_bytes(buffer.getvalue())
    split = split_module(load_stablehlo_file(path).module_text, "cholesky")
    assert [r.op_name for r in split.ops] == ["stablehlo.cholesky"]


def test_jax_functions_carry_their_primitive_names():
    graph = load_model("jax-mlp")
    split = split_module(graph.module_text, graph.name)
    tanh = next(r for r in split.ops if r.op_name == "stablehlo.tanh")
    assert tanh.provenance.framework_op == "jax.tanh"
    assert tanh.provenance.source.file.endswith("jax_models.py")


@pytest.mark.parametrize("text, expected", [
    ("module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = stablehlo.add %a, %b : tensor<4xf32>\n"
     "  return %0 : tensor<4xf32> } }", "line 2, column 26"),
    ("module { func.func @entry(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> } }",
     "has no func.func @main (it has @entry)"),
    ("module { func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n  %0 = stablehlo.abs %a : tensor<?xf32>\n"
     "  return %0 : tensor<?xf32> } }", "dynamic shape"),
])
def test_unusable_modules_get_a_clear_error(text, expected):
    with pytest.raises(ModuleError) as e:
        split_module(text, "bad")
    assert expected in str(e.value) and e.value.fix


def test_unknown_model_lists_the_zoo(zoo):
    with pytest.raises(UnknownModelError) as e:
        load_model("resnet51", zoo=zoo)
    assert "resnet50" in str(e.value) and "mlp" in str(e.value)


def test_a_users_factory_is_exported(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "class Tiny(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.lin = torch.nn.Linear(8, 4)\n"
        "    def forward(self, x):\n"
        "        return torch.tanh(self.lin(x))\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return Tiny(), (torch.randn(2, 8),)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = load_model("my_models:make")
    split = split_module(graph.module_text, graph.name)
    tanh = next(r for r in split.ops if r.op_name == "stablehlo.tanh")
    assert tanh.provenance.source.file == str(Path(tmp_path / "my_models.py"))
    assert tanh.provenance.source.line == 6


def test_a_factory_may_hand_example_inputs_of_any_dtype(tmp_path, monkeypatch):
    (tmp_path / "typed_models.py").write_text(
        "import torch\n"
        "class Mixed(torch.nn.Module):\n"
        "    def forward(self, x, h, m, c):\n"
        "        y = x.float() + h.float()\n"
        "        return torch.where(m, y, -y), torch.view_as_real(c * 2)\n"
        "def make():\n"
        "    return Mixed(), (torch.ones(2, 4, dtype=torch.bfloat16), torch.ones(2, 4, dtype=torch.float16),\n"
        "                     torch.tensor([[True, False, True, False]] * 2), torch.ones(2, dtype=torch.complex64))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = load_model("typed_models:make")
    inputs = [a for a in graph.arguments if a.kind.value == "input"]
    assert [a.tensor.dtype for a in inputs] == ["bf16", "f16", "i1", "complex<f32>"]
    assert "tensor<2x4xbf16>" in graph.module_text


def test_fp8_and_bf16_tensors_reach_numpy_bit_for_bit():
    for dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.tensor([0.5, -1.25, 3.0]).to(dtype)
        back = from_numpy(to_numpy(t))
        assert back.dtype == dtype and torch.equal(back.view(torch.uint8 if dtype.itemsize == 1 else torch.int16),
                                                   t.view(torch.uint8 if dtype.itemsize == 1 else torch.int16))


QWEN3_5_TINY = """
import torch
from transformers import AutoConfig, AutoModelForCausalLM

def make():
    cfg = AutoConfig.for_model("qwen3_5_text", vocab_size=128, hidden_size=64, intermediate_size=64,
                               num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                               max_position_embeddings=64, use_cache=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).eval(), (torch.randint(0, 128, (1, 8)),)
"""


@pytest.fixture
def qwen_tiny(tmp_path, monkeypatch) -> str:
    (tmp_path / "qwen_tiny.py").write_text(QWEN3_5_TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "qwen_tiny:make"


@pytest.mark.slow
def test_qwen3_5_s_strided_slice_writes_export_as_slices_and_concatenations(qwen_tiny):
    """Its rotary embedding writes strided slices (slice_scatter), which opbyop decomposes before
    torch-mlir: the model exports whole."""
    graph = load_model(qwen_tiny)
    assert not graph.frontend_failures, [(f.aten_op, f.message[:200]) for f in graph.frontend_failures]
    split = split_module(graph.module_text, graph.name)
    assert not split.failed and sum(r.op_name == "stablehlo.dot_general" for r in split.ops) >= 4
    assert not any(r.op_name == "stablehlo.scatter" for r in split.ops)


@pytest.mark.slow
def test_a_strided_slice_write_torch_mlir_finds_invalid_is_cut_out_by_its_location(qwen_tiny):
    """The strided slice writes as torch-mlir itself lowers them (opbyop's decompositions left out):
    its StableHLO fails its own verifier, naming no op but the location the exporter gave it."""
    model, inputs = importlib.import_module(qwen_tiny.split(":")[0]).make()
    for module in model.modules():  # torch-mlir misses non-persistent buffers (the exporter does this too)
        module._non_persistent_buffers_set.clear()
    program = torch.export.export(model, tuple(inputs), strict=False).run_decompositions(get_decomposition_table())
    lowered = _lowered(program, "qwen_tiny")
    text, failures = lowered.text, lowered.failures
    assert failures, "the strided slice writes should have been cut out"
    assert {f.aten_op for f in failures} == {"aten.slice_scatter.default"}
    assert all("scatter" in f.message for f in failures)
    assert text.count("stablehlo.dot_general") >= 4  # the rest of the model is there


class DirectAtenOp(torch.nn.Module):
    """An aten op called directly, under no_grad: torch.export records no torch function for it, and
    the region as a higher-order op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            counts = torch.ops.aten.histc.default(x, 4) * 2
        return counts + x[:4]


def test_a_frontend_failure_without_a_torch_function_names_the_aten_op_responsible():
    graph = export_torch(DirectAtenOp(), [torch.randn(8)], "direct")
    named = {f.aten_op: f.framework_op for f in graph.frontend_failures}
    assert named == {"aten.histc.default": "aten.histc.default"}, named
