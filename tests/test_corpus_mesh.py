"""The multichip corpus: sharded collective modules, their shardings, and their numpy references."""

from __future__ import annotations

import numpy as np
import pytest

from opbyop.corpus.mesh_catalog import MESH_SHAPES, groups, mesh_cases
from opbyop.device.arch import BLACKHOLE_P150
from opbyop.device.kernels.ccl import KERNELS, MeshCall
from opbyop.device.mesh import Mesh, module_shardings, sdy_to_mesh_axes
from opbyop.device.mesh_runtime import module_shapes
from opbyop.device.program import Op


def test_the_corpus_covers_every_collective_dtype_and_mesh_axis():
    cases = list(mesh_cases())
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert {c.op for c in cases} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                                     "collective_broadcast"}
    assert {c.mesh for c in cases} == set(MESH_SHAPES) and {c.dtype for c in cases} == {"f32", "bf16", "i32"}
    assert {c.axis for c in cases if c.mesh == (2, 4)} == {"x", "y"}


def test_a_case_module_declares_its_mesh_shardings_and_global_shapes():
    case = next(c for c in mesh_cases([(2, 4)], ["bf16"]) if c.op == "reduce_scatter" and c.axis == "x")
    text = case.render()
    declared = module_shardings(text)
    assert declared.mesh_axes == [("x", 2), ("y", 4)]
    assert declared.inputs[0].dims == ((1,), (0,))  # rows split over "y" (columns), columns over "x"
    assert module_shapes(text) == ([case.global_in], [case.global_out])
    assert "replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]>" in text
    assert groups((2, 4), "y") == [[0, 1, 2, 3], [4, 5, 6, 7]]


def _ttnn_op(case) -> Op:
    axis = sdy_to_mesh_axes(case.mesh_axes)[case.axis]
    attrs = {"cluster_axis": axis}
    name = {"all_reduce": "ttnn.all_reduce", "all_gather": "ttnn.all_gather", "reduce_scatter": "ttnn.reduce_scatter",
            "all_to_all": "ttnn.all_to_all", "collective_permute": "ttnn.collective_permute"}[case.op]
    attrs.update({"all_reduce": {"reduce_type": case.variant}, "all_gather": {"all_gather_dim": 1},
                  "reduce_scatter": {"scatter_dim": 1, "reduce_type": "sum"},
                  "all_to_all": {"split_dim": 1, "concat_dim": 0}, "collective_permute": {}}[case.op])
    if case.op == "collective_permute":
        attrs = {"source_target_pairs": [p for g in groups(case.mesh, case.axis)
                                         for i in range(len(g)) for p in (g[i], g[(i + 1) % len(g)])]}
    return Op(name=name, operands=[0], results=[1], operand_types=[None], result_types=[None], attrs=attrs)


@pytest.mark.parametrize("case", [c for c in mesh_cases(dtypes=["f32"]) if c.op != "collective_broadcast"],
                         ids=lambda c: c.name)
def test_each_cases_reference_agrees_with_the_collective_kernels_on_its_shards(case):
    text = case.render()
    declared = module_shardings(text)
    mesh = Mesh(BLACKHOLE_P150, case.mesh)
    x = np.random.default_rng(0).standard_normal(case.global_in).astype(np.float32)
    shards = declared.inputs[0].shard(x, mesh.shape)
    out, _ = KERNELS[_ttnn_op(case).name](MeshCall(_ttnn_op(case), [[s] for s in shards], mesh))
    got = declared.outputs[0].gather([o[0] for o in out], mesh.shape)
    np.testing.assert_allclose(got, case.reference(x), rtol=1e-5, atol=1e-5)


def test_the_multichip_corpus_is_written_as_verified_modules_with_a_manifest(tmp_path):
    import json

    from opbyop.corpus.mesh_catalog import MESH_MANIFEST, generate_mesh
    from opbyop.errors import OpbyopError

    entries = generate_mesh(tmp_path, [(1, 2), (2, 2)], ["f32"])
    assert len(entries) == 7 + 14  # one axis on 1x2, two on 2x2
    manifest = json.loads((tmp_path / MESH_MANIFEST).read_text())
    assert {e["file"] for e in manifest} == {p.name for p in tmp_path.glob("*.mlir")}
    assert "sdy.manual_computation" in (tmp_path / entries[0].file).read_text()
    with pytest.raises(OpbyopError, match="no dtype f64"):
        generate_mesh(tmp_path, [(1, 2)], ["f64"])
    with pytest.raises(OpbyopError, match="fewer than two chips"):
        generate_mesh(tmp_path, [(1, 1)], ["f32"])
