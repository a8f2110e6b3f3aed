"""A run as a TT-NN Visualizer report, loaded by the real visualizer (PyPI `ttnn-visualizer`, from the
environment `make visualizer` builds): its API answers with opbyop's operations, buffers, circular
buffers and verdicts, and its pages show them in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from store_samples import DOT, history

from opbyop.records import OpPlacement
from opbyop.visualizer import VisualizerUnavailable, locate
from opbyop_storage.dataset import Store
from opbyop_storage.exports.visualizer import MEMORY_FOLDER, PERFORMANCE_FOLDER, TTNN_FOLDER, build_report, export_visualizer
from opbyop_storage.exports.visualizer_server import running

MATMUL_L1 = 212_992  # the largest circular buffers of the sample run, per core


def _placement(ttnn_op: str, grid: tuple[int, int], l1: int, cycles: int) -> OpPlacement:
    return OpPlacement(ttnn_op=ttnn_op, grid=grid, block_tiles=(2, 2), buffer_factor=2, l1_bytes_per_core=l1,
                       cycles=cycles, candidates=10, legal=4, policy="fewest_cycles")


@pytest.fixture
def vis_store(store_root: Path) -> Store:
    """The sample history, with the matmul op's program placed as the simulator does: a tilize on one
    core, then the matmul on a 2x4 grid with the run's largest circular buffers."""
    store = Store(store_root)
    for night in history():
        for r in night.results:
            if r.signature == DOT.signature and r.device is not None:
                r.device.placements = [_placement("ttnn.to_layout", (1, 1), 8192, 4134),
                                       _placement("ttnn.matmul", (2, 4), MATMUL_L1, 5400)]
        store.write_run(night.run, night.ops, night.results, night.models)
    return store


def _get(url: str):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def _stored_placements(store: Store, run_id: str) -> list[OpPlacement]:
    results = {r.signature: r for r in store.results(run_id)}
    out = []
    for op in store.ops(run_id):
        result = results.get(op.signature)
        if result is not None and result.device is not None:
            out.extend(result.device.placements)
    for stored in sorted(store.models(run_id), key=lambda m: m.summary.model):
        if stored.summary.whole is not None and stored.summary.whole.device is not None:
            out.extend(stored.summary.whole.device.placements)
    return out


@pytest.mark.slow  # starts the visualizer's server
def test_the_visualizer_serves_the_runs_operations_buffers_and_verdicts(vis_store: Store) -> None:
    placements = _stored_placements(vis_store, "n2")
    with running(vis_store, "n2") as (served, _):
        operations = _get(served.api("operations"))
        buffers = _get(served.api("buffers"))
        per_op = _get(served.api("operation-buffers"))
        errors = _get(served.api("errors"))
        devices = _get(served.api("devices"))
        cluster = _get(served.api("cluster-descriptor"))
        perf = _get(served.api("performance/perf-results"))
        analysis = _get(served.api("performance/perf-results/report"))  # tt-perf-report, inside the visualizer
        matmul = next(o for o in operations if o["name"] == "ttnn.matmul")
        detail = _get(served.api(f"operations/{matmul['id']}"))

    placed = [o for o in operations if o["name"].startswith("ttnn.")]
    assert [o["name"] for o in placed] == [p.ttnn_op for p in placements]
    assert len(perf) == len(placements)  # the performance report holds the same device ops
    assert [r["op_code"] for r in analysis["report"]][:2] == ["BinaryDeviceOperation", "BinaryDeviceOperation"]
    # tt-perf-report read the matmul's M, K, N from the shapes (4x32 by 32x32, tile-padded)
    assert "MatmulDeviceOperation 32 x 32 x 32" in {r["op_code"] for r in analysis["report"]}
    assert "torch.matmul" in matmul["stack_trace"] and "mlp.py" in matmul["stack_trace"]
    # every op's operands and results are DRAM buffers of the op, on the one chip
    assert len(buffers) == sum(len(o["buffers"]) for o in per_op) > 0
    assert {b["buffer_type"] for b in buffers} == {0} and {d["device_id"] for d in devices} == {0}
    assert devices[0]["worker_l1_size"] == 1_572_864  # p150
    assert cluster["arch"] == {"0": "Blackhole"} and cluster["boardtype"] == {"0": "p150"}
    # the matmul's circular buffers: the stored bytes per core on each of its 8 cores
    cbs = [n for n in detail["device_operations"] if n["node_type"] == "circular_buffer_allocate"]
    assert [int(n["params"]["size"]) for n in cbs] == [MATMUL_L1]
    assert cbs[0]["params"]["core_range_set"] == "{[(x=0,y=0) - (x=3,y=1)]}"
    # the verdicts: n2's failures, each with its message, as the errors of their ops
    messages = {e["error_type"]: e["error_message"] for e in errors}
    assert messages["golden_failed"].startswith("output mismatch: pcc 0.93")
    assert messages["compile_failed"] == "error: 'ttir.gather' op unsupported index 4x1xi64"
    assert messages["split_failed"] == "region captures a value defined in another region"


def test_the_reports_peak_circular_buffers_and_counts_equal_the_stored_placements(vis_store: Store,
                                                                                 tmp_path: Path) -> None:
    report = export_visualizer(vis_store, "n2", tmp_path / "vis")
    placements = _stored_placements(vis_store, "n2")
    db = sqlite3.connect(tmp_path / "vis" / MEMORY_FOLDER / "db.sqlite")
    graphs = [json.loads(g) for (g,) in db.execute("SELECT captured_graph FROM captured_graph ORDER BY operation_id")]
    sizes = [int(n["params"]["size"]) for g in graphs for n in g if n["node_type"] == "circular_buffer_allocate"]
    assert report.peak_l1_bytes == max(sizes) == max(p.l1_bytes_per_core for p in placements) == MATMUL_L1
    assert len(sizes) == len(placements)
    perf_rows = (tmp_path / "vis" / PERFORMANCE_FOLDER / "ops_perf_results.csv").read_text().splitlines()
    assert len(perf_rows) == 1 + len(placements)


def test_one_ops_report_holds_its_program_only(vis_store: Store, tmp_path: Path) -> None:
    report = build_report(vis_store, "n2", signature=DOT.signature)
    assert [o.name for o in report.operations] == ["ttnn.to_layout", "ttnn.matmul"]
    assert report.occurrences == [("mlp", 0)] and report.whole_models == []
    assert [t.desc.shape for t in report.operations[0].inputs] == [(4, 32), (32, 32)]
    assert [t.desc.shape for t in report.operations[-1].outputs] == [(4, 32)]


def test_a_missing_visualizer_names_make_visualizer(tmp_path: Path) -> None:
    with pytest.raises(VisualizerUnavailable, match="make visualizer"):
        locate(tmp_path / "no-such-environment")


@pytest.mark.slow  # starts the visualizer's server
def test_opbyop_visualize_prints_the_url_and_ctrl_c_stops_the_visualizer_and_removes_the_report(
        vis_store: Store) -> None:
    command = [sys.executable, "-m", "opbyop.cli.main", "visualize", "--run", "n2", "--model", "mlp",
               "--store", str(vis_store.root)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        url, lines = None, []
        for line in server.stdout:
            lines.append(line)
            if m := re.search(r"(http://127\.0\.0\.1:(\d+)/operations\?instanceId=(\w+))", line):
                url, port, instance = m.group(1), m.group(2), m.group(3)
                break
        assert url is not None, "".join(lines)
        api = f"http://127.0.0.1:{port}/api"
        names = [o["name"] for o in _get(f"{api}/operations?instanceId={instance}")]
        assert names == [o.name for o in build_report(vis_store, "n2", model="mlp").operations]
        assert names[:3] == ["ttnn.to_layout", "ttnn.matmul", "ttnn.add"]  # mlp's dot, then its add
        instance_info = _get(f"{api}/instance?instanceId={instance}")
        report_dir = Path(instance_info["profiler_path"]).parent.parent
        assert report_dir.is_dir()
        os.killpg(server.pid, signal.SIGINT)
        tail = server.communicate(timeout=30)[0]
        assert server.returncode == 0 and "stopped" in tail
        assert not report_dir.exists()
        time.sleep(0.5)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{api}/up", timeout=2)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.skipif(not __import__("shutil").which("chromium"), reason="chromium is not on PATH (make browser)")
def test_headless_chromium_shows_the_operations_and_the_matmuls_circular_buffers_in_l1(vis_store: Store,
                                                                                       tmp_path: Path) -> None:
    from chromium_page import ChromiumPage

    with running(vis_store, "n2", model="mlp") as (served, _):
        matmul = next(o for o in _get(served.api("operations")) if o["name"] == "ttnn.matmul")
        page_url = f"http://127.0.0.1:{served.port}/{{}}?instanceId={served.instance_id}"
        with ChromiumPage(tmp_path / "chromium-profile") as page:
            page.goto(page_url.format("operations"))
            listed = page.wait_for("document.body.innerText.includes('ttnn.matmul (mlp.py:10)') && "
                                   "document.body.innerText", timeout=60)
            page.screenshot(tmp_path / "visualizer-operations.png")
            page.goto(page_url.format(f"operations/{matmul['id']}"))
            detail = page.wait_for("document.body.innerText.includes('Peak L1 memory load per core') && "
                                   "document.body.innerText", timeout=60)
            time.sleep(1)  # the memory plot's frame
            png = page.screenshot(tmp_path / "visualizer-l1.png")
    print(f"screenshots: {tmp_path / 'visualizer-operations.png'} {png}")
    assert f"Showing {len(build_report(vis_store, 'n2', model='mlp').operations)} operations" in listed
    # the L1 view: the circular buffers from the first free address, 208 KiB on each of the grid's 8 cores
    assert "177280" in detail and "208 KiB" in detail and "x 8 cores" in detail


@pytest.mark.slow  # starts the visualizer's server
def test_a_mesh_runs_report_has_a_device_per_chip_and_the_cluster_the_visualizer_reads(store_root: Path) -> None:
    night = history()[2]
    night.run = night.run.model_copy(update={"run_id": "m1", "chip": "p300", "mesh": "1x2", "topology": "linear"})
    store = Store(store_root)
    store.write_run(night.run, night.ops, night.results, night.models)
    with running(store, "m1", model="mlp") as (served, _):
        devices = _get(served.api("devices"))
        buffers = _get(served.api("buffers"))
        cluster = _get(served.api("cluster-descriptor"))
        first = _get(served.api("operations/0"))
    assert [d["device_id"] for d in devices] == [0, 1]
    assert sorted({b["device_id"] for b in buffers}) == [0, 1] and len(buffers) % 2 == 0
    cbs = [n for n in first["device_operations"] if n["node_type"] == "circular_buffer_allocate"]
    assert sorted(n["params"]["device_id"] for n in cbs) == ["0", "1"]  # the same program on both chips
    assert set(cluster["arch"].values()) == {"Blackhole"} and len(cluster["ethernet_connections"]) == 1


def test_an_ops_operand_is_the_tensor_its_producer_gave_so_the_graph_has_the_edge(vis_store: Store) -> None:
    report = build_report(vis_store, "n2", model="mlp")
    first_dot = [o for o in report.operations if o.arguments.get("position") == "0"]
    first_add = next(o for o in report.operations if o.arguments.get("position") == "1")
    assert first_add.inputs[0].tensor_id == first_dot[-1].outputs[0].tensor_id  # fc1's dot feeds its add
    assert first_add.inputs[1].tensor_id not in {t.tensor_id for o in first_dot for t in o.outputs}


@pytest.mark.slow
def test_a_real_run_of_the_zoos_cnn_loads_with_the_stored_peak_l1_and_buffer_counts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", "cnn", "--workers", "1", "--run-id", "cnn1",
                           "--no-shrink"], capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "OPBYOP_STORE"}, "OPBYOP_HOME": str(home)},
                          timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    store, run_id = Store(home / "store"), "cnn1"
    placements = _stored_placements(store, run_id)
    with running(store, run_id) as (served, _):
        operations = _get(served.api("operations"))
        per_op = _get(served.api("operation-buffers"))
        errors = _get(served.api("errors"))
        graphs = [_get(served.api(f"operations/{o['id']}"))["device_operations"] for o in operations]
    cbs = [int(n["params"]["size"]) for g in graphs for n in g if n["node_type"] == "circular_buffer_allocate"]
    assert [o["name"] for o in operations if o["name"].startswith("ttnn.")] == [p.ttnn_op for p in placements]
    assert cbs == [p.l1_bytes_per_core for p in placements if p.l1_bytes_per_core]
    assert max(cbs) == max(p.l1_bytes_per_core for p in placements)
    stored = {r.signature: r for r in store.results(run_id)}
    # each op's peak L1 per core, as the store holds it, is the largest circular buffer the report shows for it
    peaks: dict[str, int] = {}
    for o in build_report(store, run_id).operations:
        if o.placement is not None and "signature" in o.arguments:
            peaks[o.arguments["signature"]] = max(peaks.get(o.arguments["signature"], 0), o.placement.l1_bytes_per_core)
    assert peaks and peaks == {sig: r.device.peak_l1_bytes for sig, r in stored.items()
                               if r.device is not None and r.device.placements}
    operand_buffers = sum(len(op.inputs) + len(op.outputs) for op in store.ops(run_id))  # one DRAM buffer each
    assert sum(len(o["buffers"]) for o in per_op) == operand_buffers
    assert len(errors) == sum(1 for op in store.ops(run_id)
                              if op.split_error or (op.signature in stored and stored[op.signature].status.value != "success"))


ADD_BF16 = """func.func @main(%a: tensor<64x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<64x64xbf16> {
  %0 = stablehlo.add %a, %b : tensor<64x64xbf16>
  return %0 : tensor<64x64xbf16>
}
"""


@pytest.mark.slow  # ttsim (`make ttsim`) and the visualizer's server: without them the test fails, never skips
def test_an_op_run_by_ttnn_on_ttsim_opens_ttnns_own_report_beside_opbyops(tmp_path: Path, monkeypatch) -> None:
    home, program = tmp_path / "home", tmp_path / "add.mlir"
    program.write_text(ADD_BF16)
    env = {k: v for k, v in os.environ.items() if k not in ("OPBYOP_STORE", "JAX_PLATFORMS")}
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", str(program), "--device", "ttsim",
                           "--ttnn-report", "--no-whole"], capture_output=True, text=True,
                          env={**env, "OPBYOP_HOME": str(home), "COLUMNS": "200"}, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    run_id = re.search(r"stored as run (\S+);", done.stdout).group(1)
    monkeypatch.setenv("OPBYOP_HOME", str(home))  # the export reads ttnn's report from the run's artifact store
    store = Store(home / "store")
    (result,) = store.results(run_id)
    assert result.device_backend == "ttsim" and result.ttsim.outcome.value == "ran", result.ttsim
    assert result.ttsim.report is not None, result.ttsim.report_error
    with running(store, run_id, signature=result.signature) as (served, _):
        ours = [o["name"] for o in _get(served.api("operations"))]
        assert served.ttnn_url is not None and served.ttnn_url != served.url
        theirs = [o["name"] for o in _get(served.api("operations", served.ttnn_instance_id))]
        their_buffers = _get(served.api("operation-buffers", served.ttnn_instance_id))
    assert "ttnn.add" in ours  # opbyop's report of the op's program, as the device model placed it
    assert "BinaryNgDeviceOperation" in theirs  # ttnn's own: the device operation tt-metal ran for the add
    assert any(b["buffers"] for b in their_buffers)  # with the DRAM buffers tt-metal allocated for it
    written = export_visualizer(store, run_id, tmp_path / "vis", signature=result.signature)
    assert written.ttnn_report == result.ttsim.report
    assert (tmp_path / "vis" / TTNN_FOLDER / "db.sqlite").is_file()
