"""The accuracy trace of a whole sharded model: every chip's output of each op compared with XLA:CPU's
value of the op on a host mesh (a replicated value chip by chip, shards assembled first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opbyop.analysis.accuracy_trace import TaggedModule, TraceObserver
from opbyop.device.program import Op

DATA = Path(__file__).parent / "data" / "mesh"


def _op(tag: int) -> Op:
    return Op(name="ttnn.add", operands=[0], results=[1], operand_types=[None], result_types=[None], attrs={},
              location=f'loc("opbyop.{tag}"("x.py":1:1))')


def _observer(reference: np.ndarray, mesh_shape=(1, 2)) -> TraceObserver:
    tagged = TaggedModule(text="", all_outputs_text="", ops={0: ("stablehlo.add", reference.shape, "x.py:1")},
                          traced=[0])
    return TraceObserver(tagged, {0: reference}, 0.99, mesh_shape)


def test_a_replicated_value_is_judged_by_its_worst_chip():
    want = np.random.default_rng(0).standard_normal((32, 64))
    observer = _observer(want)
    observer(_op(0), [want.astype(np.float32)], 0)
    observer(_op(0), [-want.astype(np.float32)], 1)  # chip 1's copy is wrong
    (point,) = observer.compare().values()
    assert point.below_threshold and point.pcc < 0


def test_shards_are_assembled_into_the_global_value_before_they_are_compared():
    want = np.random.default_rng(1).standard_normal((32, 64))
    observer = _observer(want)
    for chip, shard in enumerate(np.split(want, 2, axis=1)):
        observer(_op(0), [shard.astype(np.float32)], chip)
    (point,) = observer.compare().values()
    assert not point.below_threshold and point.pcc > 0.9999 and point.max_abs_error < 1e-6


@pytest.mark.slow
def test_a_whole_sharded_model_is_accuracy_traced_on_its_mesh(tmp_path: Path):
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_thresholds
    from opbyop.frontends.loader import load_stablehlo_file
    from opbyop.records import Status
    from opbyop.worker.process import OpWorker

    model = load_stablehlo_file(DATA / "p300" / "tp_mlp" / "stablehlo.mlir")
    settings = AnalysisSettings(thresholds=load_thresholds(), mesh="1x2", topology="linear", accuracy_trace="on")
    with OpWorker(resolve("p300").path, tmp_path, chip="p300", name="tests-trace",
                  env={"OPBYOP_HOST_DEVICES": "2"}) as worker:
        whole = worker.analyze_whole(model, settings)
    assert whole.status is Status.SUCCESS, whole.message
    trace = whole.accuracy_trace
    # as many points as the same MLP unsharded on one chip has (3: the compiler fuses the rest), and
    # the row-parallel dot_general's value, each chip's partial sum once the all_reduce has run
    assert trace is not None and trace.message is None and len(trace.points) >= 4, trace
    assert "stablehlo.dot_general" in {p.op_name for p in trace.points}
    assert trace.first_below is None and all(p.pcc is not None and p.pcc > 0.999 for p in trace.points)
