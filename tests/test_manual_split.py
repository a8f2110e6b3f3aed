"""A shard_map body (sdy.manual_computation) is split into its ops: each op of the body a module of
its own at its per-device shapes, the collective among them, and the ops chained on a host mesh
give the whole body's result."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opbyop.ir.split import split_module

BODY = Path(__file__).parent / "data" / "mesh" / "shard_map_body.mlir"  # dot, all_reduce, x0.5, tanh on 1x2


def test_each_op_of_a_shard_map_body_is_an_op_of_its_own_at_its_local_shapes():
    split = split_module(BODY.read_text(), "body")
    assert [r.op_name for r in split.ops] == ["stablehlo.dot_general", "stablehlo.all_reduce", "stablehlo.multiply",
                                              "stablehlo.tanh"]
    assert all(r.ok and r.mesh for r in split.ops)
    dot, reduce, multiply, tanh = split.ops
    # the body's arguments keep the shard_map's in_shardings; between ops a value is each chip's piece, stacked
    assert dot.operand_shardings == ['#sdy.sharding<@mesh, [{}, {"x"}]>', '#sdy.sharding<@mesh, [{"x"}, {}]>']
    assert dot.result_shardings == ['#sdy.sharding<@mesh, [{"x"}, {}]>'] == reduce.operand_shardings
    assert [i.shape for i in reduce.inputs] == [(64, 64)]
    assert "tensor<32x64xf32>) -> tensor<32x64xf32>" in reduce.module_text  # the collective at local shapes
    assert reduce.module_text.count("sdy.manual_computation") == 1 and "dot_general" not in reduce.module_text
    assert "stablehlo.constant" in multiply.module_text and len(multiply.inputs) == 1  # its constant kept inside
    assert tanh.result_shardings == ['#sdy.sharding<@mesh, [{}, {}]>']  # what the body returns, as it declares
    assert [s.model_argument for s in dot.input_sources] == [0, 1]
    assert [s.position for s in tanh.input_sources] == [2]
    assert [o.position for o in split.outputs] == [3]


def test_a_shard_map_body_with_one_op_stays_that_op():
    text = (Path(__file__).parent / "data" / "mesh" / "4xp150" / "psum" / "stablehlo.mlir").read_text()
    (op,) = split_module(text, "psum").ops
    assert op.op_name == "stablehlo.all_reduce" and op.ok


def test_the_body_ops_chained_on_a_host_mesh_give_the_whole_bodys_result():
    script = textwrap.dedent(f"""
        import numpy as np
        from opbyop.jaxenv import prepare_jax
        prepare_jax()
        from opbyop.golden.replay import replay
        from opbyop.golden.xla_cpu import XlaCpu
        from opbyop.ir.split import split_module
        text = open({str(BODY)!r}).read()
        rng = np.random.default_rng(0)
        values = [rng.standard_normal((32, 128)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)]
        xla = XlaCpu()
        (whole,) = xla.run(text, values)
        (chained,) = replay(split_module(text, "body"), values, xla)
        want = np.tanh(0.5 * (values[0].astype(np.float64) @ values[1]))
        print(float(np.max(np.abs(chained - whole))), float(np.max(np.abs(whole - want))))
    """)
    env = {**os.environ, "OPBYOP_HOST_DEVICES": "2", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    chained_vs_whole, whole_vs_numpy = (float(x) for x in proc.stdout.split())
    assert chained_vs_whole <= 1e-5 and whole_vs_numpy <= 1e-4


@pytest.mark.slow
def test_every_op_of_a_shard_map_body_compiles_runs_on_its_mesh_and_matches_xla(tmp_path: Path):
    """Compile for p300's 1x2 mesh, simulated chips, XLA:CPU on two host devices: one warm worker."""
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_thresholds
    from opbyop.ir.dedupe import dedupe
    from opbyop.records import Status
    from opbyop.worker.process import OpWorker

    ops = dedupe(split_module(BODY.read_text(), "body").ops)
    settings = AnalysisSettings(thresholds=load_thresholds(), mesh="1x2", topology="linear")
    with OpWorker(resolve("p300").path, tmp_path, chip="p300", name="tests-body",
                  env={"OPBYOP_HOST_DEVICES": "2"}) as worker:
        results = {op.op_name: worker.analyze(op, settings, timeout=300) for op in ops}
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(results, Status.SUCCESS), \
        {name: r.message for name, r in results.items()}
    assert [c.op for c in results["stablehlo.all_reduce"].device.collectives] == ["ttnn.all_reduce"]
    assert not results["stablehlo.tanh"].device.collectives  # the tanh of each chip's own value, no traffic


def test_xla_cpus_missing_collective_broadcast_is_run_as_an_all_gather_of_the_first_devices_operand():
    from opbyop.corpus.mesh_catalog import mesh_cases
    from opbyop.golden.xla_rewrites import for_xla_cpu

    case = next(c for c in mesh_cases([(2, 2)], ["f32"]) if c.op == "collective_broadcast" and c.axis == "y")
    (op,) = split_module(case.render(), case.name).ops
    rewritten = for_xla_cpu(op.module_text)
    assert "collective_broadcast" not in rewritten and "stablehlo.all_gather" in rewritten
    assert "replica_groups = dense<[[0, 1], [2, 3]]>" in rewritten
    assert for_xla_cpu(BODY.read_text()) == BODY.read_text()  # nothing to rewrite: the text as it was
