"""A run's simulated per-op device cost as tt-metal's ops perf CSV, the file `tt-perf-report` reads.

One row per TTNN device op the simulator placed: for every occurrence of every op of every model
(the op's single-op program), then for every model's whole-model program. Columns are tt-metal's
profiler names (v2.1: shapes as "padded[logical]", DEVICE ARCH and AVAILABLE WORKER CORE COUNT);
`LOC` names the op a row belongs to (model:position and the MLIR location) so each row maps back.

Durations are simulated cycles at the chip's stated AI clock (opbyop.device.arch: Wormhole n150 1 GHz,
Blackhole p150 1.35 GHz, from Tenstorrent's board specifications). The simulator models no host
dispatch, so OP TO OP LATENCY is 0. Tensors are DRAM-interleaved (the compiler's default layout for
an op's operands and results), tiled 32x32: the padded dims are the last two rounded up to 32.
HOST START/END TS place the rows end to end on one simulated timeline (tt-perf-report sorts by them),
in program order: the ops of each occurrence, the occurrences by model and position, then the
whole-model programs.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from opbyop.atomic import write_text
from opbyop.compiler.targets import BOARDS
from opbyop.device.arch import BLACKHOLE_P150, WORMHOLE_N150, DeviceSpec
from opbyop.records import DeviceRun, OpPlacement, OpRecord, TensorDesc
from opbyop.workspace import Workspace
from opbyop_storage.dataset import Store

TILE = 32
DIMS = ("W", "Z", "Y", "X")
SHAPE_TENSORS = ("INPUT_0", "INPUT_1", "OUTPUT_0")

COLUMNS = [
    "OP CODE", "OP TYPE", "GLOBAL CALL COUNT", "DEVICE ID", "ATTRIBUTES", "MATH FIDELITY", "CORE COUNT",
    "AVAILABLE WORKER CORE COUNT", "DEVICE ARCH", "HOST START TS", "HOST END TS", "DEVICE FW DURATION [ns]", "DEVICE KERNEL DURATION [ns]", "OP TO OP LATENCY [ns]", "DEVICE KERNEL CYCLES",
    *[f"{t}_{d}_PAD[LOGICAL]" for t in SHAPE_TENSORS for d in DIMS],
    *[f"{t}_{k}" for t in SHAPE_TENSORS for k in ("LAYOUT", "DATATYPE", "MEMORY")],
    "LOC", "MODEL", "POSITION", "STABLEHLO OP", "SIGNATURE", "TTNN OP", "GRID",
]

# tt-metal's device operation class names (what its profiler writes as OP CODE) for TTNN ops;
# tt-perf-report classifies rows by these (Matmul and Conv2d rows get FLOPs and DRAM figures).
_CLASS_OF: dict[str, str] = {
    "matmul": "MatmulDeviceOperation", "linear": "MatmulDeviceOperation",
    "conv2d": "Conv2dDeviceOperation", "conv_transpose2d": "ConvTranspose2dDeviceOperation",
    "to_layout": "TilizeWithValPaddingDeviceOperation", "typecast": "TypecastDeviceOperation",
    "permute": "PermuteDeviceOperation", "transpose": "TransposeDeviceOperation",
    "reshape": "ReshapeDeviceOperation", "repeat": "RepeatDeviceOperation", "concat": "ConcatDeviceOperation",
    "slice": "SliceDeviceOperation", "pad": "PadDeviceOperation", "where": "WhereDeviceOperation",
    "softmax": "SoftmaxDeviceOperation", "layer_norm": "LayerNormDeviceOperation",
    "rms_norm": "LayerNormDeviceOperation", "embedding": "EmbeddingsDeviceOperation",
    "argmax": "ArgMaxDeviceOperation", "max_pool2d": "Pool2DDeviceOperation", "avg_pool2d": "Pool2DDeviceOperation",
    "upsample": "UpSampleDeviceOperation", "full": "FullDeviceOperation", "ones": "FullDeviceOperation",
    "zeros": "FullDeviceOperation", "empty": "FullDeviceOperation", "arange": "ArangeDeviceOperation",
    "all_gather": "AllGatherDeviceOperation", "reduce_scatter": "ReduceScatterDeviceOperation",
    "all_reduce": "AllReduceAsyncDeviceOperation", "mesh_shard": "MeshShardDeviceOperation",
    "cumsum": "AccumulationDeviceOperation", "gather": "GatherDeviceOperation",
    "scatter": "ScatterDeviceOperation", "sort": "SortDeviceOperation", "topk": "TopKDeviceOperation",
}
_BINARY = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "power", "remainder", "atan2",
           "eq", "ne", "lt", "le", "gt", "ge", "equal", "not_equal", "less", "less_equal", "greater",
           "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
           "bitwise_xor", "logical_left_shift", "logical_right_shift", "squared_difference"}
_REDUCE = {"sum", "mean", "max", "min", "prod", "reduce_and", "reduce_or"}
_UNARY_PREFIXES = ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "relu", "gelu", "tanh", "sigmoid", "sin", "cos",
                   "tan", "floor", "ceil", "sign", "reciprocal", "clamp", "erf", "silu", "leaky_relu", "logical_not",
                   "bitwise_not", "isfinite", "cbrt", "expm1", "log1p", "round", "hardsigmoid", "mish")
_DTYPES = {"f32": "FLOAT32", "bf16": "BFLOAT16", "f16": "FLOAT16", "i32": "INT32", "si32": "INT32",
           "ui32": "UINT32", "i16": "UINT16", "ui16": "UINT16", "i8": "UINT8", "ui8": "UINT8", "i1": "BFLOAT16",
           "i64": "INT32", "f64": "FLOAT32"}  # the compiler narrows 64-bit types and computes booleans as bf16
_FIDELITY = {"lofi": "LoFi", "hifi2": "HiFi2", "hifi3": "HiFi3", "hifi4": "HiFi4"}
_DEFAULT_FIDELITY = "HiFi4"  # what tt-mlir attaches when no option overrides it (its compute_config)


def tt_datatype(dtype: str) -> str:
    """tt-metal's DataType name for an MLIR element type (`bf16` -> BFLOAT16)."""
    return _DTYPES.get(dtype, "FLOAT32")


def op_class(ttnn_op: str) -> str:
    """tt-metal's device operation class for a TTNN op name (`ttnn.matmul` -> MatmulDeviceOperation)."""
    name = ttnn_op.removeprefix("ttnn.")
    if name in _CLASS_OF:
        return _CLASS_OF[name]
    if name in _BINARY:
        return "BinaryDeviceOperation"
    if name in _REDUCE:
        return "ReduceDeviceOperation"
    if name.startswith(_UNARY_PREFIXES):
        return "UnaryDeviceOperation"
    return "".join(part.capitalize() for part in name.split("_")) + "DeviceOperation"


def chip_spec(chip: str) -> DeviceSpec:
    """The chip preset a run's chip name stands for (n150, n300, t3k are Wormhole; p100/p150 and others
    Blackhole; a user's descriptor by its name)."""
    board = BOARDS.get(chip)
    wormhole = board.arch == "wormhole_b0" if board is not None else chip.startswith("n")
    return WORMHOLE_N150 if wormhole else BLACKHOLE_P150


def _fidelity_of(program: str | None, option: str | None) -> str:
    if program and (m := re.search(r"math_fidelity = (\w+)", program)):
        return _FIDELITY.get(m.group(1).lower(), _DEFAULT_FIDELITY)
    return _FIDELITY.get((option or "").lower(), _DEFAULT_FIDELITY)


def _dims(shape: tuple[int, ...]) -> list[str]:
    """W, Z, Y, X of a shape as 'padded[logical]' (leading dims folded into W, ranks < 4 padded with 1)."""
    dims = list(shape)
    if len(dims) > 4:
        lead = 1
        for d in dims[:-3]:
            lead *= d
        dims = [lead, *dims[-3:]]
    dims = [1] * (4 - len(dims)) + dims
    padded = dims[:2] + [-(-d // TILE) * TILE if d else 0 for d in dims[2:]]
    return [f"{p}[{d}]" for p, d in zip(padded, dims)]


def _tensor_columns(prefix: str, tensor: TensorDesc | None, device_id: int) -> dict[str, Any]:
    """A tensor's shape, layout, dtype and memory cells; an unknown tensor (a whole-model program's op)
    has no shape, but its memory cell is still text: tt-perf-report reads it as a string."""
    shape = _dims(tensor.shape) if tensor is not None else [""] * len(DIMS)
    out: dict[str, Any] = dict(zip((f"{prefix}_{d}_PAD[LOGICAL]" for d in DIMS), shape))
    out[f"{prefix}_LAYOUT"] = "Layout::TILE"
    out[f"{prefix}_DATATYPE"] = _DTYPES.get(tensor.dtype, "FLOAT32") if tensor is not None else ""
    out[f"{prefix}_MEMORY"] = f"DEV_{device_id}_DRAM_INTERLEAVED"
    return out


def _attributes(p: OpPlacement, extra: dict[str, str]) -> str:
    """tt-metal's attribute cell: {'name': 'value'; ...}."""
    values = {"ttnn_op": p.ttnn_op, "grid": f"{p.grid[0]}x{p.grid[1]}", "block_tiles": f"{p.block_tiles[0]}x{p.block_tiles[1]}",
              "buffer_factor": str(p.buffer_factor), "l1_bytes_per_core": str(p.l1_bytes_per_core),
              "t_stream": p.t_stream, "policy": p.policy, "candidates": str(p.candidates), "legal": str(p.legal), **extra}
    return "{" + "; ".join(f"'{k}': '{v}'" for k, v in values.items()) + "}"


@dataclass
class PerfRows:
    """The CSV's rows, built in order (GLOBAL CALL COUNT counts them)."""

    device_id: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    clock_ns: int = 0  # where the simulated timeline is

    def add(self, placement: OpPlacement, spec: DeviceSpec, fidelity: str, loc: str, tensors: list[TensorDesc | None],
            ident: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        ns = placement.cycles * 1000 / spec.clock_mhz
        row: dict[str, Any] = {
            "OP CODE": op_class(placement.ttnn_op), "OP TYPE": "tt_dnn_device",
            "GLOBAL CALL COUNT": len(self.rows) + 1, "DEVICE ID": self.device_id,
            "ATTRIBUTES": _attributes(placement, extra or {}), "MATH FIDELITY": fidelity,
            "CORE COUNT": placement.grid[0] * placement.grid[1], "AVAILABLE WORKER CORE COUNT": spec.cores,
            "DEVICE ARCH": spec.arch, "HOST START TS": self.clock_ns, "HOST END TS": self.clock_ns + round(ns),
            "DEVICE FW DURATION [ns]": round(ns), "DEVICE KERNEL DURATION [ns]": round(ns),
            "OP TO OP LATENCY [ns]": 0, "DEVICE KERNEL CYCLES": placement.cycles, "LOC": loc,
            "TTNN OP": placement.ttnn_op, "GRID": f"{placement.grid[0]}x{placement.grid[1]}", **ident,
        }
        for prefix, tensor in zip(SHAPE_TENSORS, tensors):
            row.update(_tensor_columns(prefix, tensor, self.device_id))
        self.rows.append(row)
        self.clock_ns += round(ns)


def _operand_tensors(op: OpRecord, ttnn_op: str) -> list[TensorDesc | None]:
    """INPUT_0, INPUT_1, OUTPUT_0 of a row: the StableHLO op's operands and result, or for a matmul or
    conv the operands as tt-metal lays them out (what tt-perf-report reads M, K, N from)."""
    ins = [o.tensor for o in sorted(op.operands, key=lambda o: o.index)] or list(op.inputs)
    out = op.outputs[0] if op.outputs else None
    try:
        if ttnn_op in ("ttnn.matmul", "ttnn.linear") and op.op_name == "stablehlo.dot_general" and len(ins) > 1 and out:
            return _matmul_tensors(ins[0], ins[1], out, op.attributes.get("dot_dimension_numbers") or {})
        if ttnn_op == "ttnn.conv2d" and op.op_name == "stablehlo.convolution" and len(ins) > 1 and out:
            return _conv_tensors(ins[0], ins[1], out, op.attributes.get("dimension_numbers") or {})
    except (KeyError, IndexError, TypeError, ValueError):
        pass  # attributes this reading does not know: the operands as they are
    return [ins[0] if ins else None, ins[1] if len(ins) > 1 else None, out]


def _product(values: Iterable[int]) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _matmul_tensors(lhs: TensorDesc, rhs: TensorDesc, out: TensorDesc, numbers: dict[str, Any]) -> list[TensorDesc | None]:
    """[batch, M, K] x [batch, K, N] -> [batch, M, N] from dot_general's dimension numbers."""
    lb, lc = numbers.get("lhs_batching_dimensions", []), numbers["lhs_contracting_dimensions"]
    rb, rc = numbers.get("rhs_batching_dimensions", []), numbers["rhs_contracting_dimensions"]
    batch = _product(lhs.shape[d] for d in lb)
    k = _product(lhs.shape[d] for d in lc)
    m = _product(d for i, d in enumerate(lhs.shape) if i not in lb and i not in lc)
    n = _product(d for i, d in enumerate(rhs.shape) if i not in rb and i not in rc)
    return [TensorDesc(shape=(batch, m, k), dtype=lhs.dtype), TensorDesc(shape=(batch, k, n), dtype=rhs.dtype),
            TensorDesc(shape=(batch, m, n), dtype=out.dtype)]


def _conv_tensors(x: TensorDesc, w: TensorDesc, out: TensorDesc, numbers: dict[str, Any]) -> list[TensorDesc | None]:
    """tt-metal's conv2d operands: activations [1, 1, N*H*W, C_in], weights [1, 1, kh*kw*C_in, C_out],
    output [1, 1, N*OH*OW, C_out]."""
    c_in = x.shape[numbers["input_feature_dimension"]]
    c_out = w.shape[numbers["kernel_output_feature_dimension"]]
    window = _product(w.shape[d] for d in numbers["kernel_spatial_dimensions"])
    nhw_in = _product(d for i, d in enumerate(x.shape) if i != numbers["input_feature_dimension"])
    nhw_out = _product(d for i, d in enumerate(out.shape) if i != numbers["output_feature_dimension"])
    return [TensorDesc(shape=(1, 1, nhw_in, c_in), dtype=x.dtype), TensorDesc(shape=(1, 1, window * c_in, c_out), dtype=w.dtype),
            TensorDesc(shape=(1, 1, nhw_out, c_out), dtype=out.dtype)]


def _conv_window(op: OpRecord) -> dict[str, str]:
    """tt-metal's sliding window attribute of a conv2d (tt-perf-report reads the window from it)."""
    if op.op_name != "stablehlo.convolution":
        return {}
    try:
        numbers = op.attributes["dimension_numbers"]
        weights = [o.tensor for o in sorted(op.operands, key=lambda o: o.index)][1]
        kh, kw = (weights.shape[d] for d in numbers["kernel_spatial_dimensions"])
        sh, sw = op.attributes.get("window_strides") or (1, 1)
    except (KeyError, IndexError, TypeError, ValueError):
        return {}
    return {"sliding_window_config": f"SlidingWindowConfig(window_hw=({kh};{kw}); stride_hw=({sh};{sw}))"}


class _Programs:
    """The TTNN program text of a result (for its chip and math fidelity), read once per artifact."""

    def __init__(self) -> None:
        self.artifacts = Workspace.default().artifacts
        self._text: dict[str, str | None] = {}

    def text(self, artifacts: dict[str, str]) -> str | None:
        digest = artifacts.get("ttnn_runtime") or artifacts.get("ttnn")
        if not digest:
            return None
        if digest not in self._text:
            try:
                self._text[digest] = self.artifacts.read_text(digest)
            except (OSError, UnicodeDecodeError):
                self._text[digest] = None
        return self._text[digest]

    def spec(self, text: str | None, fallback: DeviceSpec) -> DeviceSpec:
        if text and "#ttcore.system_desc<" in text:
            try:
                return DeviceSpec.from_system_desc(text)
            except Exception:  # a descriptor this parser does not read: the run's chip preset
                return fallback
        return fallback


def perf_rows(store: Store, run_id: str, signatures: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every simulated device op of the run, per op occurrence, then per whole-model program; with
    `signatures`, the occurrences of those unique ops only (and the whole-model programs)."""
    run = store.run(run_id)
    fallback = chip_spec(run.chip)
    option = ((run.config or {}).get("compiler") or {}).get("math_fidelity") if isinstance(run.config, dict) else None
    programs = _Programs()
    results = {r.signature: r for r in store.results(run_id, signatures)}
    out = PerfRows()
    for op in store.ops(run_id, signatures=signatures):
        result = results.get(op.signature) if op.signature else None
        device = result.device if result is not None else None
        if device is None or not device.placements:
            continue
        text = programs.text(result.compile.artifacts if result.compile else {})
        spec, fidelity = programs.spec(text, fallback), _fidelity_of(text, option)
        loc = f"{op.model}:{op.position} {op.provenance.location}".strip()
        ident = {"MODEL": op.model, "POSITION": op.position, "STABLEHLO OP": op.op_name, "SIGNATURE": op.signature}
        for p in device.placements:
            tensors = _operand_tensors(op, p.ttnn_op)
            extra = _conv_window(op) if p.ttnn_op == "ttnn.conv2d" else {}
            out.add(p, spec, fidelity, loc, tensors, ident, extra)
    for stored in sorted(store.models(run_id), key=lambda m: m.summary.model):
        whole = stored.summary.whole
        device: DeviceRun | None = whole.device if whole is not None else None
        if whole is None or device is None:
            continue
        text = programs.text(whole.compile.artifacts if whole.compile else {})
        spec, fidelity = programs.spec(text, fallback), _fidelity_of(text, option)
        for i, p in enumerate(device.placements):
            ident = {"MODEL": stored.summary.model, "POSITION": "", "STABLEHLO OP": "", "SIGNATURE": ""}
            out.add(p, spec, fidelity, f"{stored.summary.model}:whole:{i}", [None, None, None], ident)
    return out.rows


def busiest_signatures(store: Store, run_id: str, n: int) -> list[str]:
    """The unique ops of the run whose occurrences can rank among its `n` with the most simulated
    device time, found without reading the others: the `n` with the most cycles and any tied with the
    last of them (each occurrence of an op takes its op's time, and a run's ops share one chip, whose
    clock orders them as their cycles do)."""
    table = store.read_table("results", run_id, columns=["signature", "placements"])
    placements = table.column("placements").combine_chunks()
    cycles = pc.struct_field(pc.list_flatten(placements), "cycles")
    per_op = pa.table({"op": pc.list_parent_indices(placements), "cycles": cycles}).group_by("op").aggregate(
        [("cycles", "sum")])
    if n <= 0 or per_op.num_rows == 0:
        return []
    ranked = pc.sort_indices(per_op, [("cycles_sum", "descending")])
    last = per_op.column("cycles_sum")[ranked[min(n, per_op.num_rows) - 1].as_py()]
    busiest = per_op.filter(pc.greater_equal(per_op.column("cycles_sum"), last)).column("op")
    return pc.take(table.column("signature"), busiest).to_pylist()


def to_csv(rows: Iterable[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def export_perf(store: Store, run_id: str, out: Path) -> int:
    """Write the run's ops perf CSV to `out` (atomically); the number of rows."""
    rows = perf_rows(store, run_id)
    write_text(Path(out), to_csv(rows))
    return len(rows)


def top_ops(rows: Iterable[dict[str, Any]], n: int = 20) -> list[dict[str, Any]]:
    """The op occurrences (and whole-model programs) that take the most simulated device time."""
    by_loc: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["LOC"].split(" ", 1)[0] if r["POSITION"] != "" else f"{r['MODEL']}:whole"
        entry = by_loc.setdefault(key, {"op": key, "model": r["MODEL"], "stablehlo_op": r["STABLEHLO OP"] or "whole model",
                                        "ttnn_ops": 0, "cycles": 0, "device_ns": 0, "max_cores": 0, "op_codes": []})
        entry["ttnn_ops"] += 1
        entry["cycles"] += r["DEVICE KERNEL CYCLES"]
        entry["device_ns"] += r["DEVICE KERNEL DURATION [ns]"]
        entry["max_cores"] = max(entry["max_cores"], r["CORE COUNT"])
        if r["OP CODE"] not in entry["op_codes"]:
            entry["op_codes"].append(r["OP CODE"])
    ranked = sorted(by_loc.values(), key=lambda e: (-e["device_ns"], e["op"]))[:n]
    return [{**e, "op_codes": ", ".join(e["op_codes"])} for e in ranked]

