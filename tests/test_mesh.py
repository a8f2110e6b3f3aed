"""Sharded models on meshes: targets, Shardy shardings through the split, the compile for the mesh,
golden on a host mesh."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from opbyop.compiler.targets import Topology, target_for
from opbyop.errors import OpbyopError

def sharded_dot(rows: int = 1, cols: int = 2) -> str:
    """dot -> tanh -> reduce, its contracting dimension split over the mesh's last axis."""
    axis = "y" if rows > 1 else "x"
    axes = f'["x"={rows}, "y"={cols}]' if rows > 1 else f'["x"={cols}]'
    return f"""module @jit_f attributes {{mhlo.num_partitions = {rows * cols} : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <{axes}>
  func.func public @main(%arg0: tensor<64x128xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{"{axis}"}}]>}}, %arg1: tensor<128x256xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"{axis}"}}, {{}}]>}}) -> (tensor<256xf32>) {{
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
    %1 = stablehlo.tanh %0 : tensor<64x256xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<64x256xf32>, tensor<f32>) -> tensor<256xf32>
    return %2 : tensor<256xf32>
  }}
}}
"""


SHARDED_DOT = sharded_dot()


def _named_sharding_graph():
    """A JAX function jitted with NamedSharding on its inputs (an abstract 2-device mesh)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

    from opbyop.frontends.jax_export import export_jax

    mesh = AbstractMesh((2,), ("x",))
    fn = jax.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=0),
                 in_shardings=(NamedSharding(mesh, P(None, "x")), NamedSharding(mesh, P("x", None))))
    rng = np.random.default_rng(0)
    return export_jax(fn, [rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 256), np.float32)],
                      "sharded-jax")


def test_each_board_is_a_mesh_with_the_topology_its_links_make():
    assert (target_for("p300").mesh, target_for("p300").topology) == ((1, 2), Topology.LINEAR)
    assert target_for("p150x4", "2x2").topology is Topology.RING  # UMD's 4xP150: links 0-2-1-3-0
    assert target_for("p150x8", "2x4").chips == 8
    assert target_for("bh-galaxy").mesh == (4, 8)
    assert target_for("p150").topology is Topology.SINGLE
    with pytest.raises(OpbyopError, match="cannot be used as a 4x4 mesh"):
        target_for("p150x8", "4x4")


def test_a_named_sharding_function_splits_into_ops_carrying_their_shardings():
    from opbyop.ir.split import split_module

    split = split_module(_named_sharding_graph().module_text, "sharded-jax")
    dot = next(r for r in split.ops if r.op_name == "stablehlo.dot_general")
    assert dot.mesh == "x=2"
    assert dot.operand_shardings == ['#sdy.sharding<@mesh, [{}, {"x"}]>', '#sdy.sharding<@mesh, [{"x"}, {}]>']
    assert "sdy.mesh @mesh" in dot.module_text and "mhlo.num_partitions = 2" in dot.module_text
    # the same op unsharded is another unique op: the shardings are part of the signature
    plain = split_module(SHARDED_DOT.replace(' {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}', "")
                         .replace(' {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}', ""), "plain")
    assert plain.ops[0].signature != dot.signature


def test_propagated_shardings_reach_the_ops_downstream():
    from opbyop.ir.split import split_module

    text = SHARDED_DOT.replace('[{}, {"x"}]', '[{"x"}, {}]').replace('[{"x"}, {}]>}) ->', '[{}, {}]>}) ->')
    split = split_module(text, "batch-sharded")
    tanh = next(r for r in split.ops if r.op_name == "stablehlo.tanh")
    assert tanh.operand_shardings == ['#sdy.sharding<@mesh, [{"x"}, {}]>']  # from the dot's result
    assert tanh.result_shardings == ['#sdy.sharding<@mesh, [{"x"}, {}]>']


def test_a_sharded_module_is_refused_on_a_single_chip_unless_unsharded_on_purpose(tmp_path):
    from opbyop.pipeline import prepare

    path = tmp_path / "sharded.mlir"
    path.write_text(SHARDED_DOT)
    refused = prepare([str(path)], target=target_for("p150"))
    assert not refused.graphs
    assert "single chip" in next(iter(refused.errors.values()))
    unsharded = prepare([str(path)], target=target_for("p150"), unshard=True)
    graph = next(iter(unsharded.graphs.values()))
    assert any("unsharded" in note for note in graph.notes)
    assert all(r.mesh is None and "sdy" not in r.module_text for r in next(iter(unsharded.splits.values())).ops)
    fits = prepare([str(path)], target=target_for("p300"))
    assert fits.graphs and not fits.errors


@pytest.mark.slow
def test_a_model_sharded_for_2x4_is_refused_on_the_same_chips_arranged_1x8(zoo):
    from opbyop.pipeline import prepare

    refused = prepare(["llama-tp-2x4"], zoo, target=target_for("p150x8", "1x8"))
    assert "2x4 mesh" in refused.errors["llama-tp-2x4"] and "--mesh 2x4" in refused.errors["llama-tp-2x4"]
    assert prepare(["llama-tp-2x4"], zoo, target=target_for("p150x8", "2x4")).graphs


@pytest.fixture(scope="module")
def p300_worker(workspace_root):
    from opbyop.compiler.system_desc import resolve
    from opbyop.worker.process import OpWorker

    with OpWorker(resolve("p300").path, workspace_root, chip="p300", name="tests-p300") as w:
        yield w


def test_the_sharded_dot_compiles_on_p300_with_the_all_reduce_the_model_needs(p300_worker, compile_only, workspace):
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    split = split_module(_named_sharding_graph().module_text, "sharded-jax")
    dot = next(op for op in dedupe(split.ops) if op.op_name == "stablehlo.dot_general")
    settings = compile_only.model_copy(update={"mesh": "1x2", "topology": "linear"})
    result = p300_worker.analyze(dot, settings, timeout=300)
    assert result.compile is not None and result.compile.ok, result.message
    program = workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
    assert '"ttnn.all_reduce"' in program
    assert (result.mesh, result.topology) == ("1x2", "linear")


def test_mesh_fields_survive_the_store(tmp_path):
    from opbyop_storage.convert import op_from_row, op_row, result_from_row, result_row, run_from_row, run_row
    from opbyop.records import OpRecord, OpResult, RunInfo, Stage, Status

    op = OpRecord(model="m", position=0, op_name="stablehlo.dot_general", signature="s", mesh="x=2",
                  operand_shardings=['#sdy.sharding<@mesh, [{}, {"x"}]>', ""], result_shardings=[""])
    back = op_from_row(op_row("r", op))
    assert (back.mesh, back.operand_shardings, back.result_shardings) == (op.mesh, op.operand_shardings, [""])
    result = OpResult(signature="s", op_name="x", status=Status.NOT_SIMULATED, depth=Stage.FLATBUFFER,
                      mesh="1x2", topology="linear")
    assert (result_from_row(result_row("r", result)).mesh, result_from_row(result_row("r", result)).topology) == \
        ("1x2", "linear")
    run = RunInfo(run_id="r", chip="p150x8", mesh="2x4", topology="2d")
    assert (run_from_row(run_row(run)).mesh, run_from_row(run_row(run)).topology) == ("2x4", "2d")


def test_sql_lists_a_runs_sharded_ops_with_their_shardings_and_the_target_mesh(store_root):
    from opbyop.records import ModelSummary, OpRecord, OpResult, RunInfo, Stage, Status
    from opbyop_storage.aggregate import run_query
    from opbyop_storage.dataset import Store
    from opbyop_storage.readonly import StoreConnection

    sharding = '#sdy.sharding<@mesh, [{}, {"x"}]>'
    ops = [OpRecord(model="m", position=0, op_name="stablehlo.dot_general", signature="a", mesh="x=2",
                    operand_shardings=[sharding, sharding], result_shardings=[""]),
           OpRecord(model="m", position=1, op_name="stablehlo.tanh", signature="b")]
    results = [OpResult(signature=s, op_name=o.op_name, status=Status.NOT_SIMULATED, depth=Stage.FLATBUFFER,
                        mesh="1x2", topology="linear") for s, o in zip("ab", ops)]
    store = Store(store_root)
    store.write_run(RunInfo(run_id="r1", chip="p300", mesh="1x2", topology="linear", status="completed"), ops,
                    results, [ModelSummary(model="m", frontend="jax", ops_total=2, ops_unique=2)])
    with StoreConnection(store.root) as con:
        rows = run_query(con, "mesh_ops", run_id="r1").records()
    assert [(r["op_name"], r["module_mesh"], r["target_mesh"], r["topology"]) for r in rows] == [
        ("stablehlo.dot_general", "x=2", "1x2", "linear")]
    assert rows[0]["operand_shardings"] == [sharding, sharding]


def test_a_shard_map_body_is_split_into_its_ops_and_its_psum_compiles_to_an_all_reduce(p300_worker, compile_only,
                                                                                         workspace):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh, PartitionSpec as P

    from opbyop.frontends.jax_export import export_jax
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module

    mesh = AbstractMesh((2,), ("x",))
    fn = jax.jit(jax.shard_map(lambda a, b: jax.lax.psum(jnp.tanh(a) @ b, "x"), mesh=mesh,
                               in_specs=(P(None, "x"), P("x", None)), out_specs=P()))
    graph = export_jax(fn, [np.ones((64, 128), np.float32), np.ones((128, 256), np.float32)], "shard-map")
    assert "mhlo.num_partitions = 2" in graph.module_text  # JAX writes 1 for an abstract mesh
    ops = dedupe(split_module(graph.module_text, graph.name).ops)
    assert [op.op_name for op in ops] == ["stablehlo.tanh", "stablehlo.dot_general", "stablehlo.all_reduce"]
    for op in ops:  # each at its per-chip shapes, in a shard_map of its own
        result = p300_worker.analyze(op, compile_only, timeout=300)
        assert result.compile is not None and result.compile.ok, result.message
        program = workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
        assert ('"ttnn.all_reduce"' in program) == (op.op_name == "stablehlo.all_reduce")


def test_the_tensor_parallel_llama_compiles_whole_for_its_mesh(p300_worker, compile_only, zoo, workspace):
    from opbyop.frontends.loader import load_entry

    whole = p300_worker.analyze_whole(load_entry(zoo.get("llama-tp-1x2")), compile_only, timeout=600)
    assert whole.compile is not None and whole.compile.ok, whole.message
    program = workspace.artifacts.read_text(whole.compile.artifacts["ttnn_runtime"])
    assert program.count('"ttnn.all_reduce"') >= 2  # after the row-parallel o_proj and down_proj


def test_a_sharded_op_sent_to_a_single_chip_worker_is_refused_by_name(worker, compile_only):
    from opbyop.ir.dedupe import dedupe
    from opbyop.ir.split import split_module
    from opbyop.records import Status

    dot = dedupe(split_module(SHARDED_DOT, "m").ops)[0]
    result = worker.analyze(dot, compile_only, timeout=300)
    assert result.status is Status.INFRA_ERROR and result.compile is None
    assert "sharded over 2 devices" in result.message and "1 chip" in result.message


def test_golden_of_a_sharded_op_on_two_host_devices_equals_the_unsharded_result(tmp_path):
    from opbyop.ir.split import split_module

    dot = split_module(SHARDED_DOT, "m").ops[0].module_text
    (tmp_path / "dot.mlir").write_text(dot)
    script = textwrap.dedent(f"""
        import numpy as np
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from opbyop.golden.xla_cpu import XlaCpu
        rng = np.random.default_rng(1)
        a, b = rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 256), np.float32)
        gathered, shards = XlaCpu().run_sharded(open({str(tmp_path / 'dot.mlir')!r}).read(), [a, b])
        np.save({str(tmp_path / 'out.npy')!r}, gathered[0])
        np.save({str(tmp_path / 'a.npy')!r}, a); np.save({str(tmp_path / 'b.npy')!r}, b)
        print(len(shards[0]))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": "2", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "2"  # one shard per host device
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_a_sharded_op_without_arguments_runs_again_from_the_golden_disk_cache(tmp_path):
    # a second board of the same mesh (p300 then n300 in one nightly) finds the executable on disk;
    # loaded from there, a module with no argument (a constant) used to fail as an analyzer_error
    constant = textwrap.dedent("""
        module attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
          sdy.mesh @mesh = <["batch"=2]>
          func.func @main() -> tensor<16xf32> {
            %cst = stablehlo.constant dense<1.500000e+00> : tensor<16xf32>
            return %cst : tensor<16xf32>
          }
        }""")
    (tmp_path / "constant.mlir").write_text(constant)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from opbyop.golden.xla_cpu import XlaCpu
        text, cache = open({str(tmp_path / 'constant.mlir')!r}).read(), Path({str(tmp_path / 'xla')!r})
        first = XlaCpu(cache_dir=cache).run(text, [], key="constant")
        again = XlaCpu(cache_dir=cache)
        second = again.run(text, [], key="constant")
        print(again.compiles, float(first[0].sum()), float(second[0].sum()))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": "2", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "0 24.0 24.0"  # loaded, not compiled; the same values


def test_a_large_block_several_host_devices_hold_is_one_host_array_not_a_copy_each(tmp_path):
    # a 2x2 host mesh, the input split over "b" (columns) and replicated over "a": four devices,
    # two distinct blocks of 2 MB; XLA:CPU uses an aligned contiguous host array in place, so each
    # block is made once (a 70B embedding on a Galaxy: 2 GB instead of 17)
    (tmp_path / "negate.mlir").write_text(textwrap.dedent("""
        module attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
          sdy.mesh @mesh = <["a"=2, "b"=2]>
          func.func @main(%arg0: tensor<1024x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>})
              -> (tensor<1024x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>}) {
            %0 = stablehlo.negate %arg0 : tensor<1024x1024xf32>
            return %0 : tensor<1024x1024xf32>
          }
        }"""))
    script = textwrap.dedent(f"""
        import numpy as np
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from jax._src.sharding_impls import GSPMDSharding
        from opbyop.golden.xla_cpu import XlaCpu
        text = open({str(tmp_path / 'negate.mlir')!r}).read()
        golden = XlaCpu()
        exe = golden.executable(text)
        x = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
        sharding = GSPMDSharding(list(exe.local_devices()), exe.get_parameter_shardings()[0])
        held = golden.put_on_mesh(x, sharding)
        print(len({{s.data.unsafe_buffer_pointer() for s in held.addressable_shards}}))
        out, shards = golden.run_sharded(text, [x])
        print(bool(np.array_equal(out[0], -x)), len(shards[0]))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": "4", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-2:] == ["2", "True 4"]


def test_a_wrong_shard_on_one_device_is_named_although_the_others_match():
    from opbyop.golden.compare import Thresholds
    from opbyop.golden.mesh import compare_on_mesh

    rng = np.random.default_rng(2)
    shards = [rng.standard_normal((4, 8)), rng.standard_normal((4, 8))]
    gathered = np.concatenate(shards)
    wrong = [shards[0], -shards[1]]
    result = compare_on_mesh([np.concatenate(wrong)], [wrong], [gathered], [shards], ["f32"], Thresholds())
    assert not result.passed and not result.gathered.passed
    assert result.failing_devices() == [1]
    same = compare_on_mesh([gathered], [shards], [gathered], [shards], ["f32"], Thresholds())
    assert same.passed and same.failing_devices() == []


def test_a_tensor_parallel_plan_splits_the_llama_projections_over_the_model_axis(zoo):
    from opbyop.frontends.loader import load_entry
    from opbyop.ir.split import split_module

    graph = load_entry(zoo.get("llama-tp-1x2"))
    split = split_module(graph.module_text, graph.name)
    dots = [r for r in split.ops if r.op_name == "stablehlo.dot_general"]
    assert all(r.mesh == "model=2" for r in split.ops if r.ok)
    sharded = [r for r in dots if any('"model"' in s for s in r.operand_shardings + r.result_shardings)]
    assert len(sharded) >= 6  # q, k, v, o, gate, up, down, lm_head


@pytest.mark.slow
def test_every_op_of_the_tensor_parallel_llama_runs_on_its_p300_mesh_and_the_whole_model_matches_torch(tmp_path):
    """The program of an op the mesh takes whole distributes its arguments itself (ttnn.distribute_tensor,
    replicated or split per mesh axis): simulated, never not_simulated."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("JAX_")}, "OPBYOP_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", "llama-tp-1x2", "--chip", "p300"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.split("summary")[-1]
    assert "not_simulated" not in done.stdout and "success: 181" in summary, done.stdout[-3000:]
    whole = done.stdout.split("whole model")[-1]
    assert "GOLDEN" in whole and "1.00000" in whole, whole
