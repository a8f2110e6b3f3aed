"""A run as a TT-NN Visualizer report: the memory report (`db.sqlite`, `config.json`) and the matching
performance report (the ops perf CSV and a device log), in the folders the visualizer loads.

One visualizer operation per TTNN device op the simulator placed, in program order: each op
occurrence's single-op program (by model and position), then each model's whole-model program. An
occurrence the compiler or the device refused, with no program to place, is one operation named by its
StableHLO op, carrying its verdict as the operation's error.

What the store holds, and so what the report shows:
- circular buffers: the device model keeps the total of an op's circular buffers per core
  (OpPlacement.l1_bytes_per_core), not each one, so each op shows one circular buffer of that size on
  every core of its grid, from the first L1 address a program may use;
- tensors: DRAM-interleaved (the compiler's default layout), one buffer each, of the op's operands and
  results; a whole-model program's ops carry no tensors (the store keeps none per op there);
- stack traces: the op's framework op, module path and source line; errors: its verdict and message;
- on a mesh, every chip runs the same program: one device per chip, each with the op's buffers.

Where one op's device verdict came from ttnn on ttsim and the run kept ttnn's own report of it
(`opbyop run --device ttsim --ttnn-report`), that report is written beside opbyop's (out/ttnn): the
same program as tt-metal itself allocated and ran it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
import tarfile
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, Field

from opbyop.op_memory import tensor_bytes
from opbyop.atomic import atomic_path, write_text
from opbyop.device.arch import DeviceSpec
from opbyop.errors import StoreError
from opbyop.records import OpPlacement, OpRecord, OpResult, Status, TensorDesc
from opbyop.workspace import Workspace
from opbyop_storage.dataset import Store
from opbyop_storage.exports.perf_csv import chip_spec, perf_rows, to_csv, tt_datatype

MEMORY_FOLDER = "memory"  # db.sqlite, config.json, cluster_descriptor.yaml
PERFORMANCE_FOLDER = "performance"  # ops_perf_results.csv, profile_log_device.csv
TTNN_FOLDER = "ttnn"  # ttnn's own memory report of one op's run on ttsim (db.sqlite), where the run kept it
BUFFER_DRAM, BUFFER_L1 = 0, 1  # tt-metal's BufferType
LAYOUT_INTERLEAVED = 0  # tt-metal's TensorMemoryLayout
DRAM_MEMORY_CONFIG = "MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,buffer_type=BufferType::DRAM)"

_SCHEMA = """
CREATE TABLE devices (device_id int, num_y_cores int, num_x_cores int, num_y_compute_cores int,
    num_x_compute_cores int, worker_l1_size int, l1_num_banks int, l1_bank_size int, address_at_first_l1_bank int,
    address_at_first_l1_cb_buffer int, num_banks_per_storage_core int, num_compute_cores int, num_storage_cores int,
    total_l1_memory int, total_l1_for_tensors int, total_l1_for_interleaved_buffers int,
    total_l1_for_sharded_buffers int, cb_limit int);
CREATE TABLE operations (operation_id int UNIQUE, name text, duration float);
CREATE TABLE operation_arguments (operation_id int, name text, value text);
CREATE TABLE tensors (tensor_id int UNIQUE, shape text, dtype text, layout text, memory_config text,
    device_id int, address int, buffer_type int);
CREATE TABLE device_tensors (tensor_id int, device_id int, address int);
CREATE TABLE buffers (operation_id int, device_id int, address int, max_size_per_bank int, buffer_type int,
    buffer_layout int);
CREATE TABLE captured_graph (operation_id int, captured_graph text);
CREATE TABLE nodes (operation_id int, unique_id int, node_operation_id int, name text);
CREATE TABLE edges (operation_id int, source_unique_id int, sink_unique_id int, source_output_index int,
    sink_input_index int, key int);
CREATE TABLE report_metadata (key text UNIQUE, value text);
CREATE TABLE errors (operation_id int, operation_name text, error_type text, error_message text,
    stack_trace text, timestamp text);
CREATE TABLE stack_traces (operation_id int, stack_trace text);
CREATE TABLE input_tensors (operation_id int, input_index int, tensor_id int);
CREATE TABLE output_tensors (operation_id int, output_index int, tensor_id int);
CREATE TABLE buffer_pages (operation_id int, device_id int, address int, core_y int, core_x int, bank_id int,
    page_index int, page_address int, page_size int, buffer_type int);
CREATE TABLE local_tensor_comparison_records (tensor_id int UNIQUE, golden_tensor_id int, matches int,
    desired_pcc float, actual_pcc float);
CREATE TABLE global_tensor_comparison_records (tensor_id int UNIQUE, golden_tensor_id int, matches int,
    desired_pcc float, actual_pcc float);
"""


class ReportTensor(BaseModel):
    tensor_id: int
    desc: TensorDesc
    address: int  # in DRAM, on every chip
    bytes: int


class ReportOp(BaseModel):
    """One operation of the report."""

    operation_id: int
    name: str  # the TTNN op (ttnn.matmul), or the StableHLO op of an occurrence with no program
    duration_s: float
    placement: OpPlacement | None = None
    inputs: list[ReportTensor] = Field(default_factory=list)
    outputs: list[ReportTensor] = Field(default_factory=list)
    arguments: dict[str, str] = Field(default_factory=dict)
    stack_trace: str = ""
    error_type: str | None = None
    error_message: str | None = None


class Report(BaseModel):
    """A whole report, before it is written."""

    run_id: str
    chip: str  # the run's target (p150, n300 ...)
    spec: DeviceSpec
    chips: int = 1
    mesh_shape: list[int] = Field(default_factory=list)
    operations: list[ReportOp] = Field(default_factory=list)
    # which perf CSV rows belong to the report: (model, position) of occurrences, models of whole programs
    occurrences: list[tuple[str, int]] = Field(default_factory=list)
    whole_models: list[str] = Field(default_factory=list)
    # one op's report: ttnn's own report of its run on ttsim (an artifact digest), where the run kept one
    ttnn_report: str | None = None

    @property
    def peak_l1_bytes(self) -> int:
        return max((o.placement.l1_bytes_per_core for o in self.operations if o.placement), default=0)


class _Dram:
    """Addresses for the report's DRAM tensors: each one after the last, aligned, per bank."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec
        self.next = spec.dram_unreserved_base
        self.count = 0

    def place(self, desc: TensorDesc) -> ReportTensor:
        tensor = ReportTensor(tensor_id=self.count, desc=desc, address=self.next, bytes=tensor_bytes(desc))
        self.count += 1
        self.next += _per_bank(tensor.bytes, self.spec)
        return tensor


def _per_bank(size: int, spec: DeviceSpec) -> int:
    """An interleaved DRAM buffer's bytes in each bank: spread over every channel, aligned."""
    per_bank = math.ceil(size / spec.num_dram_channels)
    return -(-per_bank // spec.noc_dram_address_align_bytes) * spec.noc_dram_address_align_bytes


def _stack_trace(op: OpRecord) -> str:
    """The op's origin as a Python traceback reads: its source line, framework op and module path."""
    p = op.provenance
    lines = []
    # the user's own line first: the visualizer names an operation by the trace's first frame
    frame = p.source or (p.stack[0] if p.stack else None)
    if frame is not None:
        lines.append(f'  File "{frame.file}", line {frame.line}')
    what = " ".join(x for x in (p.framework_op, f"({p.module_path})" if p.module_path else None) if x)
    lines.append(f"    {what or op.op_name}")
    lines.append(f"  {op.model}:{op.position} {op.op_name} {p.location}".rstrip())
    return "\n".join(lines)


def _arguments(op: OpRecord, placement: OpPlacement | None) -> dict[str, str]:
    args = {"model": op.model, "position": str(op.position), "stablehlo_op": op.op_name, "signature": op.signature}
    if placement is not None:
        args.update({"grid": f"{placement.grid[0]}x{placement.grid[1]}",
                     "block_tiles": f"{placement.block_tiles[0]}x{placement.block_tiles[1]}",
                     "buffer_factor": str(placement.buffer_factor), "l1_bytes_per_core": str(placement.l1_bytes_per_core),
                     "cycles": str(placement.cycles), "t_stream": placement.t_stream, "policy": placement.policy})
    return args


def _operands(op: OpRecord, dram: _Dram, produced: dict[tuple[str, int], list[ReportTensor]]) -> list[ReportTensor]:
    """The op's operands: the result of the op that computed one (so the visualizer draws the edge), else
    a tensor of its own (an argument of the model, or a producer outside the report)."""
    out = []
    for i, desc in enumerate(op.inputs):
        source = op.input_sources[i] if i < len(op.input_sources) else None
        results = produced.get((op.model, source.position)) if source is not None and source.position is not None else None
        same = results is not None and source.result < len(results) and results[source.result].desc == desc
        out.append(results[source.result] if same else dram.place(desc))
    return out


def _occurrence_ops(report: Report, op: OpRecord, result: OpResult | None, dram: _Dram,
                    produced: dict[tuple[str, int], list[ReportTensor]]) -> None:
    """The TTNN ops of one occurrence's program: the first takes the op's operands, the last gives its
    results; an occurrence with no program is one operation with its verdict."""
    device = result.device if result is not None else None
    placements = device.placements if device is not None else []
    failed = result is not None and result.status != Status.SUCCESS
    error = (result.status.value, result.message or result.status.facts.description) if failed else (None, None)
    if op.split_error:
        error = ("split_failed", op.split_error)
    inputs = _operands(op, dram, produced)
    outputs = [dram.place(t) for t in op.outputs]
    produced[(op.model, op.position)] = outputs
    stack = _stack_trace(op)
    if not placements:
        report.operations.append(ReportOp(operation_id=len(report.operations), name=op.op_name, duration_s=0.0,
                                          inputs=inputs, outputs=outputs, arguments=_arguments(op, None),
                                          stack_trace=stack, error_type=error[0], error_message=error[1]))
        return
    last = len(placements) - 1
    for i, p in enumerate(placements):
        report.operations.append(ReportOp(
            operation_id=len(report.operations), name=p.ttnn_op, duration_s=p.cycles / (report.spec.clock_mhz * 1e6),
            placement=p, inputs=inputs if i == 0 else [], outputs=outputs if i == last else [],
            arguments=_arguments(op, p), stack_trace=stack,
            error_type=error[0] if i == last else None, error_message=error[1] if i == last else None))


def build_report(store: Store, run_id: str, model: str | None = None, signature: str | None = None) -> Report:
    """The report of a run, of one model of it (its occurrences, then its whole-model program), or of one
    op's program (its first occurrence)."""
    run = store.run(run_id)
    results = {r.signature: r for r in store.results(run_id)}
    ops = store.ops(run_id, model)
    if signature is not None:
        ops = [o for o in ops if o.signature == signature][:1]
        if not ops:
            raise StoreError(f"run {run_id} has no op with signature {signature}",
                             f"list them with: opbyop query --run {run_id}")
    elif model is not None and not ops:
        raise StoreError(f"run {run_id} has no ops of model {model}", f"its models: {', '.join(run.models) or 'none'}")
    rows, cols = (int(x) for x in (run.mesh or "1x1").split("x"))
    report = Report(run_id=run_id, chip=run.chip, spec=chip_spec(run.chip), chips=rows * cols,
                    mesh_shape=[rows, cols] if rows * cols > 1 else [])
    dram = _Dram(report.spec)
    produced: dict[tuple[str, int], list[ReportTensor]] = {}
    for op in ops:  # the store keeps a model's ops in program order: producers first
        _occurrence_ops(report, op, results.get(op.signature) if op.signature else None, dram, produced)
        report.occurrences.append((op.model, op.position))
    if signature is not None:
        report.ttnn_report = _ttnn_report(results.get(signature))
    if signature is None:
        for stored in sorted(store.models(run_id), key=lambda m: m.summary.model):
            whole = stored.summary.whole
            if (model is not None and stored.summary.model != model) or whole is None or whole.device is None:
                continue
            report.whole_models.append(stored.summary.model)
            for i, p in enumerate(whole.device.placements):
                report.operations.append(ReportOp(
                    operation_id=len(report.operations), name=p.ttnn_op,
                    duration_s=p.cycles / (report.spec.clock_mhz * 1e6), placement=p,
                    arguments={"model": stored.summary.model, "whole_model_program_op": str(i),
                               "grid": f"{p.grid[0]}x{p.grid[1]}", "l1_bytes_per_core": str(p.l1_bytes_per_core),
                               "cycles": str(p.cycles)},
                    stack_trace=f"  {stored.summary.model}: whole-model program, TTNN op {i}"))
    return report


def _ttnn_report(result: OpResult | None) -> str | None:
    """ttnn's own report of the op's run, where its device verdict came from ttsim and the run kept one."""
    if result is None or result.device_backend != "ttsim" or result.ttsim is None:
        return None
    return result.ttsim.report


def write_ttnn_report(digest: str, out: Path) -> None:
    """ttnn's report folder (kept as a .tar.gz artifact) unpacked into `out`."""
    try:
        data = Workspace.default().artifacts.read(digest)
    except FileNotFoundError:
        raise StoreError(f"ttnn's report of the op's run ({digest[:16]}) is not in the artifact store",
                         "point OPBYOP_HOME at the workspace the run was made in") from None
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(out, filter="data")  # only plain files, inside `out`


def _core_range(placement: OpPlacement) -> str:
    """tt-metal's CoreRangeSet text for the op's grid (rows x columns from core (0, 0))."""
    rows, cols = placement.grid
    return f"{{[(x=0,y=0) - (x={cols - 1},y={rows - 1})]}}"


def _captured_graph(op: ReportOp, spec: DeviceSpec, chips: int) -> str:
    """tt-metal's graph capture of the op as the visualizer reads it: the op, its circular buffers on
    every chip, their release."""
    nodes: list[dict] = [{"node_type": "capture_start", "params": {}}]
    nodes.append({"node_type": "function_start", "params": {"name": op.name, "inputs": str(len(op.inputs))}})
    if op.placement is not None and op.placement.l1_bytes_per_core:
        for chip in range(chips):
            nodes.append({"node_type": "circular_buffer_allocate", "params": {
                "address": str(spec.l1_unreserved_base), "size": str(op.placement.l1_bytes_per_core),
                "core_range_set": _core_range(op.placement), "globally_allocated": "false", "device_id": str(chip)}})
    nodes.append({"node_type": "function_end", "params": {"name": op.name}})
    nodes.append({"node_type": "circular_buffer_deallocate_all", "params": {}})
    nodes.append({"node_type": "capture_end", "params": {}})
    for i, node in enumerate(nodes):
        node["counter"] = i
        node["connections"] = [i + 1] if i + 1 < len(nodes) else []
    return json.dumps(nodes)


def _device_row(chip: int, spec: DeviceSpec) -> tuple:
    rows, cols = spec.worker_grid
    cores = spec.cores
    return (chip, spec.grid_y, spec.grid_x, rows, cols, spec.l1_size, cores, spec.l1_per_core,
            spec.l1_unreserved_base, spec.l1_unreserved_base, 0, cores, 0, spec.l1_size * cores,
            spec.l1_per_core * cores, spec.l1_per_core * cores, spec.l1_per_core * cores, spec.l1_size)


def _shape(desc: TensorDesc) -> str:
    return f"Shape([{', '.join(str(d) for d in desc.shape)}])"


def write_database(report: Report, path: Path) -> None:
    """The memory report's db.sqlite, as tt-metal's ttnn writes it."""
    with atomic_path(path) as tmp:
        db = sqlite3.connect(tmp)
        try:
            db.executescript(_SCHEMA)
            db.executemany("INSERT INTO devices VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           [_device_row(chip, report.spec) for chip in range(report.chips)])
            _insert_operations(db, report)
            db.executemany("INSERT INTO report_metadata VALUES (?, ?)", [
                ("opbyop_run", report.run_id), ("arch", report.spec.arch),
                ("mesh", "x".join(str(d) for d in report.mesh_shape) or "1x1"),
                ("peak_l1_bytes_per_core", str(report.peak_l1_bytes))])
            db.commit()
        finally:
            db.close()


def _insert_operations(db: sqlite3.Connection, report: Report) -> None:
    tensors: dict[int, ReportTensor] = {}
    for op in report.operations:
        db.execute("INSERT INTO operations VALUES (?, ?, ?)", (op.operation_id, op.name, op.duration_s))
        db.executemany("INSERT INTO operation_arguments VALUES (?, ?, ?)",
                       [(op.operation_id, k, v) for k, v in op.arguments.items()])
        db.execute("INSERT INTO captured_graph VALUES (?, ?)",
                   (op.operation_id, _captured_graph(op, report.spec, report.chips)))
        db.execute("INSERT INTO nodes VALUES (?, ?, ?, ?)", (op.operation_id, 1, op.operation_id, op.name))
        if op.stack_trace:
            db.execute("INSERT INTO stack_traces VALUES (?, ?)", (op.operation_id, op.stack_trace))
        if op.error_type is not None:
            db.execute("INSERT INTO errors VALUES (?, ?, ?, ?, ?, ?)", (
                op.operation_id, op.name, op.error_type, op.error_message or "", op.stack_trace, ""))
        for table, listed in (("input_tensors", op.inputs), ("output_tensors", op.outputs)):
            for i, t in enumerate(listed):
                db.execute(f"INSERT INTO {table} VALUES (?, ?, ?)", (op.operation_id, i, t.tensor_id))
                tensors[t.tensor_id] = t
        # the DRAM buffers live while the op runs: its operands' and results'
        for t in [*op.inputs, *op.outputs]:
            for chip in range(report.chips):
                db.execute("INSERT INTO buffers VALUES (?, ?, ?, ?, ?, ?)", (
                    op.operation_id, chip, t.address, _per_bank(t.bytes, report.spec), BUFFER_DRAM, LAYOUT_INTERLEAVED))
    for t in tensors.values():
        db.execute("INSERT INTO tensors VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (
            t.tensor_id, _shape(t.desc), f"DataType::{tt_datatype(t.desc.dtype)}", "Layout::TILE",
            DRAM_MEMORY_CONFIG, 0, t.address, BUFFER_DRAM))
        db.executemany("INSERT INTO device_tensors VALUES (?, ?, ?)",
                       [(t.tensor_id, chip, t.address) for chip in range(report.chips)])


def _cluster_descriptor(report: Report) -> str:
    """The run's chips and their Ethernet neighbours as tt-metal's cluster_descriptor.yaml lists them
    (on a mesh, a grid: each chip linked to the next in its row and in its column)."""
    rows, cols = report.mesh_shape or (1, 1)
    chips = list(range(rows * cols))
    links = []
    for c in chips:
        r, k = divmod(c, cols)
        for other in ([c + 1] if k + 1 < cols else []) + ([c + cols] if r + 1 < rows else []):
            links.append(f"  - [{{chip: {c}, chan: 0}}, {{chip: {other}, chan: 0}}]")
    arch = "Wormhole" if report.spec.arch.startswith("wormhole") else "Blackhole"
    lines = ["arch:", *[f"  {c}: {arch}" for c in chips],
             "chips:", *[f"  {c}: [{c % cols}, {c // cols}, 0, 0]" for c in chips],
             "ethernet_connections:", *(links or ["  []"]),
             "chips_with_mmio:", *[f"  - {c}: {c}" for c in chips],
             "boardtype:", *[f"  {c}: {report.chip}" for c in chips]]
    return "\n".join(lines) + "\n"


def _device_log(rows: Iterable[dict], spec: DeviceSpec) -> str:
    """tt-metal's profile_log_device.csv: each op's kernel as one zone on its first core, end to end at
    the simulated cycles (the visualizer requires the file beside the ops perf CSV)."""
    out = io.StringIO()
    out.write(f"ARCH: {spec.arch}, CHIP_FREQ[MHz]: {spec.clock_mhz}, Max Compute Cores: {spec.cores}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["PCIe slot", " core_x", " core_y", " RISC processor type", " timer_id",
                     " time[cycles since reset]", " data", " run host ID", " zone name", " type", " source line",
                     " source file", " meta data"])
    now = 0
    for timer, row in enumerate(rows):
        start, now = now, now + int(row["DEVICE KERNEL CYCLES"])
        for kind, at in (("ZONE_START", start), ("ZONE_END", now)):
            writer.writerow([0, 1, 1, "BRISC", timer, at, 0, row["GLOBAL CALL COUNT"], "BRISC-FW", kind, 0, "", ""])
    return out.getvalue()


def _report_perf_rows(store: Store, report: Report) -> list[dict]:
    """The run's ops perf CSV rows of the report's occurrences and whole-model programs, renumbered."""
    occurrences = set(report.occurrences)
    rows = [r for r in perf_rows(store, report.run_id)
            if (r["MODEL"], r["POSITION"]) in occurrences
            or (r["POSITION"] == "" and r["MODEL"] in report.whole_models)]
    for i, r in enumerate(rows):
        r["GLOBAL CALL COUNT"] = i + 1
    return rows


def export_visualizer(store: Store, run_id: str, out: Path, model: str | None = None,
                      signature: str | None = None) -> Report:
    """Write the report's memory folder (out/memory) and performance folder (out/performance), and for one
    op whose run on ttsim kept it, ttnn's own report (out/ttnn)."""
    report = build_report(store, run_id, model, signature)
    memory, performance = out / MEMORY_FOLDER, out / PERFORMANCE_FOLDER
    memory.mkdir(parents=True, exist_ok=True)
    performance.mkdir(parents=True, exist_ok=True)
    write_database(report, memory / "db.sqlite")
    write_text(memory / "config.json", json.dumps({
        "report_name": f"opbyop {run_id}" + (f" {model}" if model else "") + (f" {signature[:12]}" if signature else ""),
        "enable_detailed_buffer_report": True, "enable_graph_report": False, "opbyop_run": run_id}, indent=2))
    write_text(memory / "cluster_descriptor.yaml", _cluster_descriptor(report))  # the topology view reads it
    rows = _report_perf_rows(store, report)
    write_text(performance / "ops_perf_results.csv", to_csv(rows))
    write_text(performance / "profile_log_device.csv", _device_log(rows, report.spec))
    if report.ttnn_report is not None:
        write_ttnn_report(report.ttnn_report, out / TTNN_FOLDER)
        write_text(out / TTNN_FOLDER / "config.json", json.dumps({  # the name the visualizer lists it by
            "report_name": f"ttnn on ttsim {run_id} {signature[:12] if signature else ''}".rstrip(),
            "enable_graph_report": True, "opbyop_run": run_id}, indent=2))
    return report
