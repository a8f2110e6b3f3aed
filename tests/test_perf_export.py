"""The per-op simulated device time as tt-metal's ops perf CSV, read by the real tt-perf-report."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from store_samples import DOT, history

from opbyop.records import OpPlacement
from opbyop_storage.dataset import Store
from opbyop_storage.exports.perf_csv import COLUMNS, export_perf, op_class, perf_rows

TT_PERF_REPORT = shutil.which("tt-perf-report") or str(Path(sys.executable).with_name("tt-perf-report"))
DOT_NUMBERS = {"lhs_batching_dimensions": [], "lhs_contracting_dimensions": [1], "rhs_batching_dimensions": [],
               "rhs_contracting_dimensions": [0]}


def _placement(ttnn_op: str, grid: tuple[int, int], cycles: int) -> OpPlacement:
    return OpPlacement(ttnn_op=ttnn_op, grid=grid, block_tiles=(1, 1), buffer_factor=2, l1_bytes_per_core=8192,
                       cycles=cycles, candidates=10, legal=4, policy="fewest_cycles")


@pytest.fixture
def perf_store(store_root: Path) -> Store:
    """The sample history, with the matmul op's program placed as the simulator does (a tilize, then
    the matmul) and its dimension numbers recorded as the split records them."""
    store = Store(store_root)
    for night in history():
        for op in night.ops:
            if op.signature == DOT.signature:
                op.attributes = {"dot_dimension_numbers": DOT_NUMBERS}
        for r in night.results:
            if r.signature == DOT.signature and r.device is not None:
                r.device.placements = [_placement("ttnn.to_layout", (1, 1), 4134),
                                       _placement("ttnn.matmul", (1, 4), 5400)]
        store.write_run(night.run, night.ops, night.results, night.models)
    return store


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tt_perf_report_reads_the_csv_without_a_missing_column(perf_store: Store, tmp_path: Path) -> None:
    out = tmp_path / "ops_perf.csv"
    count = export_perf(perf_store, "n2", out)
    rows = _read(out)
    assert count == len(rows) > 0 and list(rows[0]) == COLUMNS

    done = subprocess.run([TT_PERF_REPORT, str(out), "--no-color", "--no-summary", "--no-advice"], capture_output=True, text=True,
                          timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-3000:]
    assert "v2.1" in report and "Architecture: blackhole" in report
    assert not [line for line in report.splitlines() if "not found" in line or "missing" in line.lower()], report
    # the matmul row gets tt-perf-report's modelled figures: M x K x N from the padded shapes
    matmul = [line for line in report.splitlines() if "MatmulDeviceOperation" in line]
    assert len(matmul) == 2 and all("32 x 32 x 32" in line and "TFLOPs" in line for line in matmul), matmul
    assert report.count("BinaryDeviceOperation") >= 3  # the add's occurrences (mlp: 3, cnn: 1)


def test_a_row_per_placed_ttnn_op_of_every_occurrence_and_whole_model(perf_store: Store) -> None:
    rows = perf_rows(perf_store, "n2")
    occurrences = [r for r in rows if r["POSITION"] != ""]
    whole = [r for r in rows if r["POSITION"] == ""]
    # n2: add x4 (mlp 3, cnn 1) with one placement each, dot x2 with two; conv timed out, tanh/reduce failed
    # golden but ran (one placement each): tanh x1, reduce x1
    assert sorted((r["MODEL"], r["POSITION"], r["OP CODE"]) for r in occurrences if r["MODEL"] == "mlp") == sorted(
        [("mlp", 0, "TilizeWithValPaddingDeviceOperation"), ("mlp", 0, "MatmulDeviceOperation"),
         ("mlp", 1, "BinaryDeviceOperation"), ("mlp", 2, "BinaryDeviceOperation"),
         ("mlp", 3, "TilizeWithValPaddingDeviceOperation"), ("mlp", 3, "MatmulDeviceOperation"),
         ("mlp", 4, "BinaryDeviceOperation"), ("mlp", 5, "BinaryDeviceOperation")])
    assert [r["MODEL"] for r in whole] == ["mlp"]  # cnn's whole-model compile failed: nothing ran
    assert [r["GLOBAL CALL COUNT"] for r in rows] == list(range(1, len(rows) + 1))
    for r in occurrences:
        assert r["LOC"].startswith(f"{r['MODEL']}:{r['POSITION']} loc(")
        assert r["OP TYPE"] == "tt_dnn_device" and r["DEVICE ID"] == 0
    matmul = next(r for r in rows if r["OP CODE"] == "MatmulDeviceOperation")
    assert matmul["CORE COUNT"] == 4 and matmul["INPUT_0_Y_PAD[LOGICAL]"] == "32[4]"
    assert matmul["INPUT_1_X_PAD[LOGICAL]"] == "32[32]" and matmul["INPUT_0_MEMORY"] == "DEV_0_DRAM_INTERLEAVED"


def test_durations_are_the_simulated_cycles_at_the_chips_clock(perf_store: Store) -> None:
    wormhole = perf_rows(perf_store, "n0")  # n150: 1 GHz
    blackhole = perf_rows(perf_store, "n2")  # p150: 1.35 GHz
    assert all(r["DEVICE KERNEL DURATION [ns]"] == r["DEVICE KERNEL CYCLES"] for r in wormhole)
    assert {r["DEVICE ARCH"] for r in wormhole} == {"wormhole_b0"} and {r["AVAILABLE WORKER CORE COUNT"] for r in wormhole} == {64}
    assert all(r["DEVICE KERNEL DURATION [ns]"] == round(r["DEVICE KERNEL CYCLES"] / 1.35) for r in blackhole)
    assert {r["DEVICE ARCH"] for r in blackhole} == {"blackhole"}
    starts = [r["HOST START TS"] for r in blackhole]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)  # one timeline, in program order


def test_ttnn_ops_are_named_by_tt_metals_device_operation_classes() -> None:
    assert op_class("ttnn.matmul") == "MatmulDeviceOperation"
    assert op_class("ttnn.conv2d") == "Conv2dDeviceOperation"
    assert op_class("ttnn.add") == op_class("ttnn.multiply") == "BinaryDeviceOperation"
    assert op_class("ttnn.relu") == op_class("ttnn.rsqrt") == "UnaryDeviceOperation"
    assert op_class("ttnn.sum") == "ReduceDeviceOperation"
    assert op_class("ttnn.some_new_op") == "SomeNewOpDeviceOperation"


def test_export_perf_on_the_command_line_writes_the_csv(perf_store: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from opbyop.cli.main import build_app

    out = tmp_path / "p.csv"
    done = CliRunner().invoke(build_app(), ["export", "perf", "--run", "n2", "--out", str(out),
                                            "--store", str(perf_store.root)])
    assert done.exit_code == 0, done.output
    assert f"to {out}" in done.output and len(_read(out)) == len(perf_rows(perf_store, "n2"))
    missing = CliRunner().invoke(build_app(), ["export", "perf", "--run", "nope", "--store", str(perf_store.root)])
    assert missing.exit_code == 2 and "not in the store" in missing.output


def test_the_report_and_the_flow_show_the_ops_with_the_most_device_time(perf_store: Store) -> None:
    from opbyop_storage.exports.report import render_html, report_data

    data = report_data(perf_store.root, "n2")
    top = data["device_time"]
    assert top[0]["op"] == "mlp:whole" and top[0]["device_ns"] == round(50_000 / 1.35)  # the whole model's program
    ns = [t["device_ns"] for t in top]
    assert ns == sorted(ns, reverse=True)
    dot = next(t for t in top if t["stablehlo_op"] == "stablehlo.dot_general")
    assert dot["ttnn_ops"] == 2 and dot["op_codes"] == "TilizeWithValPaddingDeviceOperation, MatmulDeviceOperation"
    assert data["status_colours"]["golden_failed"] != data["status_colours"]["success"]
    page = render_html(data)
    assert 'id="device-time-table"' in page and "opbyop export perf --run" in page


@pytest.mark.parametrize("n", [1, 2, 3, 30])
def test_the_most_device_time_is_found_from_the_busiest_ops_rows_alone(perf_store: Store, n: int) -> None:
    """The report reads the rows of the few ops that can rank, not every occurrence of the run: the
    same ranking as from every row, ties at the cut included."""
    from opbyop_storage.exports.perf_csv import busiest_signatures, top_ops
    from opbyop_storage.exports.report import device_time

    busiest = busiest_signatures(perf_store, "n2", n)
    assert DOT.signature in busiest and len(busiest) <= len(perf_store.results("n2"))
    assert device_time(perf_store, "n2", n) == top_ops(perf_rows(perf_store, "n2"), n)
    assert busiest_signatures(perf_store, "n2", 0) == []
