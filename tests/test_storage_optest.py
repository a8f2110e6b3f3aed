"""OpTest JSON export: status and stage filled, message clean, each op's own times."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

import store_samples as samples
from opbyop.records import Stage, Status
from opbyop_storage.dataset import Store
from opbyop_storage.exports import optest


def test_export_fills_status_stage_and_per_op_times(history_store: Store, tmp_path: Path) -> None:
    out = tmp_path / "optest.json"
    count = optest.export_optest(history_store, "n2", out, github_job_id=77)
    records = json.loads(out.read_text())
    assert count == len(records) == 7  # mlp: dot add tanh; cnn: conv add reduce gather
    tests = [optest.OpTest.model_validate(r) for r in records]
    by = {(t.model_name, t.op_name): t for t in tests}
    assert set(by) == {("mlp", "stablehlo.dot_general"), ("mlp", "stablehlo.add"), ("mlp", "stablehlo.tanh"),
                       ("cnn", "stablehlo.convolution"), ("cnn", "stablehlo.add"), ("cnn", "stablehlo.reduce"),
                       ("cnn", "stablehlo.gather")}
    assert all(t.status is not None and t.github_job_id == 77 and t.card_type == "p150" for t in tests)

    tanh = by[("mlp", "stablehlo.tanh")]
    assert tanh.status is optest.TestStatus.GOLDEN_FAILED and not tanh.success
    assert tanh.config["failed_stage"] == "GOLDEN" and tanh.config["depth"] == "DEVICE_RUN"
    assert tanh.message == "output mismatch: pcc 0.93 < 0.99, max abs error 0.06"  # verbatim, no stage in it
    conv = by[("cnn", "stablehlo.convolution")]  # timed out on the device
    assert conv.status is optest.TestStatus.RUN_FAILED and conv.config["status"] == "timeout"
    gather = by[("cnn", "stablehlo.gather")]
    assert gather.status is optest.TestStatus.COMPILE_FAILED and gather.config["failed_stage"] == "TTIR"
    assert gather.framework_op_name == "torch.index_select" and gather.frontend == "torch"
    assert gather.inputs[0].shape == [8, 16] and gather.inputs[0].data_type == "f32"
    assert gather.op_params["failed_pass"]["pass"] == "convert-stablehlo-to-ttir"  # the compiler pass it stopped in
    assert gather.op_params["failed_pass"]["outcome"] == "failed" and tanh.op_params["failed_pass"] is None
    dot = by[("mlp", "stablehlo.dot_general")]
    assert dot.success and dot.status is optest.TestStatus.SUCCESS and dot.config["positions"] == [0, 3]
    assert dot.outputs[0].grid_shape == [2, 4]  # the grid the device model chose

    # each unique op its own real start and end (the same op in two models shares them)
    starts = {t.config["signature"]: t.test_start_ts for t in tests}
    assert len(set(starts.values())) == len(starts) == 6
    stored = {r.signature: r for r in history_store.results("n2")}
    for t in tests:
        r = stored[t.config["signature"]]
        assert t.test_start_ts == r.started_at and t.test_end_ts == r.ended_at
        assert t.test_duration.total_seconds() > 0
    assert isinstance(records[0]["test_start_ts"], str) and datetime.fromisoformat(records[0]["test_start_ts"])


def test_crash_and_skip_mapping() -> None:
    crashed = samples.result(samples.ADD, Status.CRASHED, Stage.TTNN, "worker died")
    assert optest.optest_status(crashed) is optest.TestStatus.COMPILE_FAILED
    crashed_on_device = samples.result(samples.ADD, Status.CRASHED, Stage.DEVICE_RUN, "segfault")
    assert optest.optest_status(crashed_on_device) is optest.TestStatus.RUN_FAILED
    skipped = samples.result(samples.ADD, Status.SKIPPED)
    assert optest.optest_status(skipped) is None  # nothing ran: never reported as passing


@pytest.mark.parametrize("status", [Status.NOT_SIMULATED, Status.ANALYZER_ERROR, Status.INFRA_ERROR])
def test_outcomes_without_a_verdict_are_skipped_tests_naming_their_fault(status: Status) -> None:
    result = samples.result(samples.ADD, status, Stage.DEVICE_RUN, "not simulated: ttnn.sort")
    record = samples.record("mlp", 0, samples.ADD, "fc1", line=3)
    test = optest.optest(samples.run_info("r", result.started_at, ["mlp"]), result, [record], "torch")
    assert test.skipped and not test.success and test.status is None
    assert test.config["fault"] == status.fault.value and test.config["status"] == status.value
