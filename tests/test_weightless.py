"""Models without their weights: a model is its graph and its op shapes. Tiny configurations on the
meta device prove the mechanism (meta model -> split -> every op analysed); real sizes are
benchmarks. Real torch-mlir, real compiler, real XLA:CPU."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.config import InputSpec, Zoo, ZooEntry
from opbyop.graph import ArgumentKind
from opbyop.frontends.loader import example_inputs, load_model
from opbyop.golden import upstream
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.pipeline import argument_names, prepare
from opbyop.records import Fault, Stage, Status

TINY = dict(dtype="float32", vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
IDS = [InputSpec(name="input_ids", shape=[1, 8], dtype="int64", high=64)]


def meta_entry(name: str, arch: str = "llama", layers: int = 1, **config) -> ZooEntry:
    return ZooEntry(name=name, frontend="torch", factory="opbyop.frontends.models.hf:meta_model",
                    kwargs={**TINY, "arch": arch, "num_hidden_layers": layers, **config}, inputs=IDS)


HISTOGRAM = ZooEntry(name="histogram", frontend="torch", factory="opbyop.frontends.models.small:histogram",
                     kwargs={"meta": True}, inputs=[InputSpec(shape=[4, 32])])
ZOO = Zoo(models=[meta_entry("tiny-llama"), meta_entry("tiny-llama-4", layers=4),
                  meta_entry("tiny-mixtral", arch="mixtral", layers=2, num_local_experts=4, num_experts_per_tok=2,
                             experts="grouped-dense"),
                  HISTOGRAM])


@pytest.fixture(scope="module")
def llama(workspace):
    return prepare(["tiny-llama"], zoo=ZOO, artifacts=workspace.artifacts)


def by_kind(run, op_name: str):
    return [op for op in run.unique if op.op_name == op_name]


@pytest.mark.slow
def test_a_llama_on_the_meta_device_exports_the_ops_it_has_with_real_weights():
    from opbyop.frontends.models.hf import meta_model
    from opbyop.frontends.torch_export import export_torch, from_numpy
    from opbyop.ir.split import split_module

    real = load_model("llama")  # the zoo's llama: the same configuration with random weights
    model = meta_model("llama", dtype="float32", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, intermediate_size=344,
                       max_position_embeddings=256)
    meta = export_torch(model, [from_numpy(real.argument_values[0])], "llama-meta", ["input_ids"])
    signatures = sorted(r.signature for r in split_module(meta.module_text, "m").ops)
    assert signatures == sorted(r.signature for r in split_module(real.module_text, "r").ops)
    weights = [i for i, a in enumerate(meta.arguments) if a.kind is ArgumentKind.PARAMETER and not a.buffer]
    assert len(weights) == 21 and all(meta.value(i) is None for i in weights)
    assert sorted(meta.real_values()) == [0, 22, 23]  # input_ids and the two rotary buffers
    assert np.array_equal(meta.value(0), real.argument_values[0]) and meta.reference_outputs is None


def test_values_that_matter_come_from_inputs_and_buffers_and_never_from_weights(llama, workspace):
    (gather,) = by_kind(llama, "stablehlo.gather")  # the embedding: indices are the example input ids
    ids = example_inputs(IDS, 0)[0]
    assert [v.reshape(-1).tolist() for v in upstream.load(gather, workspace.artifacts).values()] == [ids.reshape(-1).tolist()]
    (cosine,) = by_kind(llama, "stablehlo.cosine")  # rotary table: positions times the real inv_freq buffer
    (table,) = upstream.load(cosine, workspace.artifacts).values()
    positions = np.arange(8, dtype=np.float32)[:, None]
    assert np.allclose(np.cos(table)[0, :, 0], np.cos(positions[:, 0] * 1.0), atol=1e-6)
    assert not cosine.synthetic_reasons
    (rsqrt, *_) = by_kind(llama, "stablehlo.rsqrt")  # RMSNorm of the embedding: depends on a weight
    assert not rsqrt.input_values and "the weight model.model.embed_tokens.weight" in rsqrt.synthetic_reasons[0]


@pytest.mark.slow
def test_every_op_of_a_meta_model_is_analysed(llama, worker, settings):
    assert not llama.errors and not any(r.split_error for r in llama.records)
    results = {op.signature: worker.analyze(op, settings) for op in llama.unique}
    opbyops = [r for r in results.values() if r.status.fault in (Fault.OPBYOP, Fault.INFRA)
               and r.status is not Status.NOT_SIMULATED]
    assert not opbyops, [(r.op_name, r.message) for r in opbyops]
    assert sum(r.status is Status.SUCCESS for r in results.values()) >= 0.9 * len(results)


@pytest.mark.slow
def test_identical_layers_cost_one_layers_unique_ops_and_replays(workspace):
    one, four = (prepare([name], zoo=ZOO) for name in ("tiny-llama", "tiny-llama-4"))
    assert len(four.records) > 2.5 * len(one.records) and len(four.unique) == len(one.unique)
    runs: list[int] = []

    class Counting(XlaCpu):
        def run(self, *args, **kwargs):
            runs.append(1)
            return super().run(*args, **kwargs)

    for run in (one, four):
        runs.clear()
        upstream.attach(run.unique, run.splits, Counting, workspace.artifacts,
                        {n: g.real_values() for n, g in run.graphs.items()},
                        {n: argument_names(g) for n, g in run.graphs.items()})
        run.replays = len(runs)
    assert four.replays == one.replays > 0


def test_an_op_torch_mlir_cannot_lower_is_the_only_op_the_model_loses(workspace, worker, settings):
    run = prepare(["histogram"], zoo=ZOO, artifacts=workspace.artifacts)
    assert not run.errors
    (graph,) = run.graphs.values()
    assert [a.kind for a in graph.arguments][-1] is ArgumentKind.UNLOWERED and graph.value(len(graph.arguments) - 1) is None
    results = {op.signature: worker.analyze(op, settings) for op in run.unique}
    (histc,) = [op for op in run.unique if op.frontend_error]
    failed = results[histc.signature]
    assert (failed.status, failed.status.fault, failed.depth, failed.failed_stage) == (
        Status.FRONTEND_FAILED, Fault.FRONTEND, Stage.SPLIT, Stage.STABLEHLO)
    assert "torch.aten.histc" in failed.message and histc.op_name == "aten.histc.default"
    assert histc.provenance.framework_op == "torch.histc" and histc.provenance.source.file.endswith("small.py")
    others = [r for s, r in results.items() if s != histc.signature]
    assert others and all(r.status is Status.SUCCESS for r in others), [(r.op_name, r.message) for r in others]
    assert failed.status.is_verdict  # a blocker of its model


@pytest.mark.slow
def test_mixtral_routing_is_recorded_per_op_and_the_rest_of_the_model_splits(worker, settings):
    run = prepare(["tiny-mixtral"], zoo=ZOO)
    assert not run.errors and not any(r.split_error for r in run.records)
    failures = [r for r in run.records if r.frontend_error]
    assert {r.op_name for r in failures} >= {"aten.histc.default"}
    assert sum(r.op_name == "aten.histc.default" for r in failures) == 2  # one per layer ...
    assert len([op for op in run.unique if op.op_name == "aten.histc.default"]) == 1  # ... one unique op
    assert len(run.records) - len(failures) > 300
    # the experts' grouped matmuls are decomposed into ops torch-mlir lowers, never cut out
    assert not any("grouped_mm" in r.op_name for r in failures)
    experts = [r for r in run.records if r.provenance.framework_op and "grouped_mm" in r.provenance.framework_op]
    assert {r.op_name for r in experts} >= {"stablehlo.dot_general", "stablehlo.gather"}
    expert_ops = [op for op in run.unique if op.signature in {r.signature for r in experts}]
    results = [worker.analyze(op, settings) for op in expert_ops]
    assert all(r.status is Status.SUCCESS for r in results), [(r.op_name, r.status, r.message) for r in results]


def test_a_grouped_matmul_decomposed_to_static_shapes_equals_torch_s_own():
    import torch

    from opbyop.frontends.torch_decompositions import grouped_mm

    g = torch.Generator().manual_seed(0)
    rows, weights = torch.randn(10, 16, generator=g), torch.randn(4, 16, 8, generator=g)
    offs = torch.tensor([2, 5, 5, 10], dtype=torch.int32)  # an empty group too
    assert torch.equal(grouped_mm(rows, weights, offs), torch._grouped_mm(rows, weights, offs=offs))
    left, right = torch.randn(8, 32, generator=g), torch.randn(8, 32, generator=g).t()  # groups of k
    k_offs = torch.tensor([8, 16, 32], dtype=torch.int32)
    assert torch.allclose(grouped_mm(left, right, k_offs), torch._grouped_mm(left, right, offs=k_offs), atol=1e-5)
    batched = torch.randn(3, 4, 16, generator=g), torch.randn(3, 16, 8, generator=g)
    assert torch.equal(grouped_mm(*batched), torch._grouped_mm(*batched))
    assert grouped_mm(torch.randn(3, 4, 16), torch.randn(16, 8), offs) is NotImplemented  # left to cut out


def test_a_slice_scatter_decomposed_to_slices_and_a_concatenation_equals_torch_s_own():
    """Over random shapes, dims (negative too), bounds (negative, past the ends, empty) and steps."""
    import random

    import torch

    from opbyop.frontends.torch_decompositions import slice_scatter

    rng = random.Random(0)
    for _ in range(400):
        shape = [rng.randint(1, 7) for _ in range(rng.randint(1, 4))]
        dim = rng.randrange(-len(shape), len(shape))
        size = shape[dim]
        start, end = (rng.choice([None, rng.randint(-2 * size, 2 * size)]) for _ in range(2))
        step = rng.choice([1, 1, 2, 3, 5])
        input = torch.randn(shape)
        where = [slice(None)] * len(shape)
        where[dim] = slice(start, end, step)
        src = torch.randn(input[tuple(where)].shape)
        expected = torch.ops.aten.slice_scatter(input, src, dim, start, end, step)
        assert torch.equal(slice_scatter(input, src, dim, start, end, step), expected), (shape, dim, start, end, step)
    ints = torch.arange(12).view(3, 4)  # integer and boolean tensors too (BART writes token ids)
    assert torch.equal(slice_scatter(ints, ints[:, :2] * 10, 1, 1, None, 2),
                       torch.ops.aten.slice_scatter(ints, ints[:, :2] * 10, 1, 1, None, 2))
    flags = torch.zeros(2, 6, dtype=torch.bool)
    assert torch.equal(slice_scatter(flags, ~flags[:, :3], -1, -6, None, 2),
                       torch.ops.aten.slice_scatter(flags, ~flags[:, :3], -1, -6, None, 2))


def test_a_stablehlo_file_of_any_size_never_materialises_its_arguments(tmp_path):
    from opbyop.frontends.values import write_values
    from opbyop.ir.split import split_module

    path = tmp_path / "big.mlir"
    path.write_text("func.func @main(%a: tensor<40000x40000xf32>, %b: tensor<40000x40000xf32>) -> tensor<40000x40000xf32> {\n"
                    "  %0 = stablehlo.add %a, %b : tensor<40000x40000xf32>\n"
                    "  %1 = stablehlo.multiply %0, %b : tensor<40000x40000xf32>\n"
                    "  return %1 : tensor<40000x40000xf32>\n}\n")
    graph = load_model(str(path))
    assert [a.tensor.shape for a in graph.arguments] == [(40000, 40000)] * 2 and graph.argument_values == [None, None]
    assert len(split_module(graph.module_text, graph.name).ops) == 2
    npz = write_values(graph, tmp_path / "values.npz")
    assert npz.stat().st_size < 4096  # descriptions, drawn in the worker that runs the model


def test_a_whole_model_run_draws_arguments_without_values_deterministically(tmp_path):
    from opbyop.frontends.values import read_values, write_values

    path = tmp_path / "small.mlir"
    path.write_text("func.func @main(%a: tensor<4x8xbf16>, %b: tensor<3xi32>) -> tensor<4x8xbf16> {\n"
                    "  return %a : tensor<4x8xbf16>\n}\n")
    graph = load_model(str(path))
    written = write_values(graph, tmp_path / "values.npz")
    (a, b), references = read_values(written, graph.name, seed=3)
    assert (a.shape, a.dtype.name, b.shape, b.dtype.name, references) == ((4, 8), "bfloat16", (3,), "int32", [])
    again, _ = read_values(written, graph.name, seed=3)
    assert np.array_equal(a.view(np.uint16), again[0].view(np.uint16))


def test_jax_weights_given_by_shape_and_dtype_are_arguments_without_values():
    import jax
    import jax.numpy as jnp

    from opbyop.frontends.jax_export import export_jax
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    graph = export_jax(lambda x, w: jnp.tanh(x @ w), [np.ones((4, 8), np.float32),
                                                       jax.ShapeDtypeStruct((8, 1 << 20), jnp.bfloat16)], "jax-shapes")
    assert [(a.kind, a.tensor.shape, a.tensor.dtype) for a in graph.arguments] == [
        (ArgumentKind.INPUT, (4, 8), "f32"), (ArgumentKind.PARAMETER, (8, 1 << 20), "bf16")]
    assert graph.value(1) is None and graph.reference_outputs is None and "dot_general" in graph.module_text


def test_the_real_size_configurations_are_in_the_zoo_tagged_for_a_nightly(zoo):
    names = {m.name for m in zoo.tagged("real-size")}
    assert names == {"llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b", "mixtral-8x7b",
                     "whisper-large-v3-encoder", "llama-3.1-70b-galaxy", "qwen3-30b-a3b", "gpt-oss-20b",
                     "deepseek-v2-lite", "deepseek-v3", "qwen3.5-35b-a3b", "gemma-2-9b"}
    assert {m.name for m in zoo.tagged("llm")} < names and not names & {m.name for m in zoo.small()}
    assert "mlp" in {m.name for m in zoo.small()}


def test_a_nightly_target_can_choose_the_real_size_models_by_tag(zoo):
    from opbyop_flows.nightly import Target

    target = Target.model_validate({"chip": "p150", "tags": ["real-size"]})
    one_chip = {m.name for m in zoo.tagged("real-size") if m.sharding is None}
    assert set(target.chosen_models(["mlp"], zoo)) == one_chip  # a sharded model only on its plan's mesh
    galaxy = Target.model_validate({"chip": "bh-galaxy", "tags": ["real-size"]})
    assert set(galaxy.chosen_models(["mlp"], zoo)) == one_chip | {"llama-3.1-70b-galaxy"}
    assert Target().chosen_models(["mlp"], zoo) == ["mlp"]


def test_a_model_with_real_bf16_weights_exports_its_bf16_constants():
    import torch

    from opbyop.frontends.models.hf import llama
    from opbyop.frontends.torch_export import export_torch

    graph = export_torch(llama().to(torch.bfloat16), [torch.zeros(1, 8, dtype=torch.int64)], "llama-bf16", ["input_ids"])
    assert graph.reference_outputs[0].dtype.name == "bfloat16" and all(v is not None for v in graph.argument_values)
    assert "bf16" in graph.module_text
