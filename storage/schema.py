"""The Parquet tables' schemas, written out field by field and versioned.

Every file is written with exactly one of these schemas (never an inferred one) and carries the
schema version in its metadata. Bump SCHEMA_VERSION on any change; readers conform older files to
the current schema (missing columns read as nulls), so a column may be added but never repurposed.

Nullability conventions that the reader relies on to rebuild the records:
- `compile_s` is null exactly when the result has no compile outcome (likewise `device_s` for the
  device run, `golden_s` for the golden comparison, `whole_status` for the whole-model result).
- per-stage compile seconds are null for stages the compiler never reached.
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from opbyop.records import Status

SCHEMA_VERSION = 12  # 2: fault, narrowing, golden_method, run phases, a status column per status; 3: shrinks;
#                     4: meshes (runs/results: mesh, topology; ops: mesh, operand/result shardings)
#                     models.module_artifact
#                     device_mesh_shape, device_topology, per-chip peaks, collectives
#                     the frontend_failed status column
#                     real_inputs, synthetic_inputs
#                     status columns of miscompiled and simulator_error
#                     the failed pass, pass timing, the accuracy trace
#                     collective_s
#                 5: the device backend and the run on ttsim (results; whole_ttsim_* on models), the
#                    simulator_limit status column
#                 6: what tt-metal allocated on ttsim (ttsim_peak_l1_bytes, ttsim_peak_cb_bytes, ttsim_peak_dram_bytes)
#                 7: ttnn's own visualizer report of a ttsim run (ttsim_report, ttsim_report_error)
#                 8: the compiler under test (runs: compiler_*, group_id; results: compiler), which ttsim
#                    ran an op (ttsim_simulator)
#                 9: a whole model's accuracy trace on ttsim's values (models: whole_ttsim_trace*)
#                10: how far the model's outputs are from ttsim's against their scale, and what kind of
#                    difference (ttsim_max_error, ttsim_difference)
#                11: what a run took from earlier ones (models: export_reused, whole_key, whole_reused_from)
#                12: the code that made a run's verdicts (runs: verdict_code)
# The tables' columns at SCHEMA_VERSION (schema_fingerprint()): a test fails when the columns change and the
# version does not; bump the version, then record the new fingerprint here.
SCHEMA_FINGERPRINT = "66ec7d7402d80c95"
VERSION_KEY = b"opbyop.schema_version"
TABLE_KEY = b"opbyop.table"

TIMESTAMP = pa.timestamp("us", tz="UTC")

TENSOR = pa.struct([
    pa.field("shape", pa.list_(pa.int64())),
    pa.field("dtype", pa.string()),
])

SOURCE_FRAME = pa.struct([
    pa.field("file", pa.string()),
    pa.field("line", pa.int64()),
    pa.field("col", pa.int64()),
])

OPERAND = pa.struct([
    pa.field("index", pa.int64()),
    pa.field("kind", pa.string()),
    pa.field("shape", pa.list_(pa.int64())),
    pa.field("dtype", pa.string()),
    pa.field("argument", pa.int64()),
])

VALUE_REF = pa.struct([
    pa.field("position", pa.int64()),
    pa.field("result", pa.int64()),
    pa.field("model_argument", pa.int64()),
])

# The artifact kinds the compiler keeps (opbyop.compiler.stages.ARTIFACT_KINDS); any other kind goes
# to `artifacts_extra` so nothing is lost, and a test keeps this list in step with the compiler's.
ARTIFACT_KINDS = ("shlo", "ttir", "ttnn", "ttnn_runtime", "flatbuffer")
ARTIFACTS = pa.struct([pa.field(kind, pa.string()) for kind in ARTIFACT_KINDS])
KIND_HASH = pa.struct([pa.field("kind", pa.string()), pa.field("sha256", pa.string())])
REASON_COUNT = pa.struct([pa.field("reason", pa.string()), pa.field("count", pa.int64())])

PLACEMENT = pa.struct([
    pa.field("ttnn_op", pa.string()),
    pa.field("grid", pa.list_(pa.int64())),
    pa.field("block_tiles", pa.list_(pa.int64())),
    pa.field("buffer_factor", pa.int64()),
    pa.field("l1_bytes_per_core", pa.int64()),
    pa.field("cycles", pa.int64()),
    pa.field("candidates", pa.int64()),
    pa.field("legal", pa.int64()),
    pa.field("rejected", pa.list_(REASON_COUNT)),
    pa.field("fixed_by_compiler", pa.bool_()),
    pa.field("t_stream", pa.string()),  # the chosen t-streaming ("" none, "R4", "C2" ...)
    pa.field("policy", pa.string()),  # the balancer policy that chose the op model
])

# The stages a compile goes through, as `<stage>_s` seconds columns (opbyop.records.COMPILE_STAGES).
COMPILE_STAGE_COLUMNS = ("stablehlo_s", "ttir_s", "ttnn_s", "flatbuffer_s")


def compile_fields(prefix: str = "") -> list[pa.Field]:
    """One CompileOutcome, flattened (shared by results and by the whole-model columns of models)."""
    return [
        pa.field(f"{prefix}compile_reached", pa.string()),
        pa.field(f"{prefix}compile_failed_stage", pa.string()),
        pa.field(f"{prefix}compile_message", pa.string()),
        pa.field(f"{prefix}compile_diagnostics", pa.list_(pa.string())),
        *[pa.field(f"{prefix}{name}", pa.float64()) for name in COMPILE_STAGE_COLUMNS],
        pa.field(f"{prefix}compile_s", pa.float64()),
        pa.field(f"{prefix}artifacts", ARTIFACTS),
        pa.field(f"{prefix}artifacts_extra", pa.list_(KIND_HASH)),
    ]


COLLECTIVE = pa.struct([
    pa.field("op", pa.string()),
    pa.field("cluster_axis", pa.int64()),
    pa.field("group_size", pa.int64()),
    pa.field("payload_bytes", pa.int64()),
    pa.field("link_bytes", pa.int64()),
    pa.field("hops", pa.int64()),
    pa.field("cycles", pa.int64()),
])


def device_fields(prefix: str = "") -> list[pa.Field]:
    """One DeviceRun, flattened."""
    return [
        pa.field(f"{prefix}ttnn_ops", pa.int64()),
        pa.field(f"{prefix}not_simulated", pa.list_(pa.string())),
        pa.field(f"{prefix}cycles", pa.int64()),
        pa.field(f"{prefix}peak_l1_bytes", pa.int64()),
        pa.field(f"{prefix}peak_dram_bytes", pa.int64()),
        pa.field(f"{prefix}placements", pa.list_(PLACEMENT)),
        pa.field(f"{prefix}device_s", pa.float64()),
        pa.field(f"{prefix}device_message", pa.string()),
        # a mesh run (several chips); empty lists / nulls / 0 for one chip
        pa.field(f"{prefix}device_mesh_shape", pa.list_(pa.int64())),  # rows, columns
        pa.field(f"{prefix}device_topology", pa.string()),
        pa.field(f"{prefix}chip_peak_l1_bytes", pa.list_(pa.int64())),  # per chip, row-major
        pa.field(f"{prefix}chip_peak_dram_bytes", pa.list_(pa.int64())),
        pa.field(f"{prefix}collectives", pa.list_(COLLECTIVE)),
        pa.field(f"{prefix}collective_bytes", pa.int64()),
        pa.field(f"{prefix}collective_cycles", pa.int64()),
        pa.field(f"{prefix}collective_s", pa.float64()),  # of device_s, simulating the collectives
    ]


# A run on ttsim (records.TtsimRun), flattened: its field -> (column after `<prefix>ttsim_`, type).
# One list for the schema and for opbyop_storage.convert's both directions; `<prefix>ttsim_outcome` is null
# exactly when there was none.
TTSIM_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "outcome": ("outcome", pa.string()),  # ran | rejected | limit | unmapped | mapping | timeout | ...
    "message": ("message", pa.string()),  # tt-metal's or ttsim's words
    "op": ("op", pa.string()),  # the TTNN op it stopped at
    "seconds": ("s", pa.float64()),
    "runner_seconds": ("runner_s", pa.float64()),  # of ttsim_s, inside ttnn
    "agreement": ("agreement", pa.string()),  # the model against ttsim: bit_equal | within_ulps | differ ...
    "max_ulps": ("max_ulps", pa.float64()),
    "max_error": ("max_error", pa.float64()),  # the largest difference over its output's scale
    "difference": ("difference", pa.string()),  # rounding | sign | magnitude | nonfinite | shape
    "pcc": ("pcc", pa.float64()),  # a whole model's outputs on ttsim against its reference
    "peak_l1_bytes": ("peak_l1_bytes", pa.int64()),  # per core, as tt-metal allocated it
    "peak_cb_bytes": ("peak_cb_bytes", pa.int64()),  # circular + dataflow buffers, per core
    "peak_dram_bytes": ("peak_dram_bytes", pa.int64()),  # all banks
    "report": ("report", pa.string()),  # ttnn's own visualizer report: artifact digest (.tar.gz)
    "report_error": ("report_error", pa.string()),  # why it was asked for and not written
    "simulator": ("simulator", pa.string()),  # which ttsim: its version and opbyop's patch set
}


# TtsimRun's fields kept apart from TTSIM_COLUMNS, and where: a whole model's accuracy trace on ttsim's
# values is a trace like the model's own, in the models table's `whole_ttsim_trace*` columns
# (trace_fields, TRACE_PREFIXES); an op's run on ttsim is never traced, so results have no trace columns.
TTSIM_STORED_APART = {"accuracy_trace": "models.whole_ttsim_trace*"}

# TtsimRun's fields with no column, and why (each a gap, said here rather than dropped in silence).
TTSIM_NOT_STORED: dict[str, str] = {}


def ttsim_fields(prefix: str = "") -> list[pa.Field]:
    """TTSIM_COLUMNS as the table's fields."""
    return [pa.field(f"{prefix}ttsim_{column}", kind) for column, kind in TTSIM_COLUMNS.values()]


# The pass a failed compile stopped in (records.FailedPass); `failed_pass_outcome` is null exactly
# when the result has none (a compile that did not fail, or a run that did not look).
FAILED_PASS_FIELDS = [
    pa.field("failed_pass_outcome", pa.string()),  # failed | died | hung | none
    pa.field("failed_pass", pa.string()),  # the pass's argument, e.g. convert-stablehlo-to-ttir
    pa.field("failed_pass_name", pa.string()),  # its class, e.g. ConvertStableHLOToTTIR
    pa.field("failed_pass_anchor", pa.string()),  # the operation it ran on
    pa.field("failed_pass_position", pa.int64()),  # 1-based among the passes started
    pa.field("passes_started", pa.int64()),
    pa.field("last_good_pass", pa.string()),
    pa.field("failed_pass_ir", pa.string()),  # artifact: the IR before the pass
    pa.field("failed_pass_reason", pa.string()),  # why no pass could be named
    pa.field("failed_pass_s", pa.float64()),  # the verbose re-compile's wall time
]

# Each pass's time in a compile of the op (records.PassTiming); `pass_timing_reports` is null exactly
# when the op was not timed.
PASS_SECONDS = pa.struct([pa.field("pass", pa.string()), pa.field("seconds", pa.float64())])
PASS_TIMING_FIELDS = [
    pa.field("pass_timing", pa.list_(PASS_SECONDS)),  # slowest first
    pa.field("pass_timing_total_s", pa.float64()),  # the reports' total execution times
    pa.field("pass_timing_compile_s", pa.float64()),  # the timed compile's wall time
    pa.field("pass_timing_reports", pa.int64()),
]

# A whole model's accuracy trace (records.AccuracyTrace): one element per op compared along its
# depth. The model's own trace and the trace on ttsim's values (TtsimRun.accuracy_trace) have the same
# columns under their prefixes (TRACE_PREFIXES), read together as the view `accuracy_traces` (its
# `backend` column names whose trace a row is) and the model's alone as `accuracy_trace`
# (opbyop_storage.catalog); `<prefix>trace_ops` is null exactly when there is no such trace.
TRACE_POINT = pa.struct([
    pa.field("position", pa.int64()),
    pa.field("op_name", pa.string()),
    pa.field("ttnn_op", pa.string()),
    pa.field("pcc", pa.float64()),
    pa.field("max_abs_error", pa.float64()),
    pa.field("location", pa.string()),
    pa.field("added_loss", pa.float64()),
    pa.field("below_threshold", pa.bool_()),
])


def trace_fields(prefix: str) -> list[pa.Field]:
    """One AccuracyTrace, flattened under `prefix` (TRACE_PREFIXES)."""
    return [
        pa.field(f"{prefix}trace", pa.list_(TRACE_POINT)),
        pa.field(f"{prefix}trace_threshold", pa.float64()),
        pa.field(f"{prefix}trace_first_below", pa.int64()),  # position of the first op below the threshold
        pa.field(f"{prefix}trace_first_below_op", pa.string()),
        pa.field(f"{prefix}trace_most_added", pa.list_(pa.int64())),
        pa.field(f"{prefix}trace_ops", pa.int64()),
        pa.field(f"{prefix}trace_s", pa.float64()),
        pa.field(f"{prefix}trace_message", pa.string()),
    ]


# Whose values a whole model's trace was taken on (the `backend` of view accuracy_traces) -> its
# columns' prefix in the models table: the device model's stitched run, and the run on ttsim.
TRACE_PREFIXES = {"model": "whole_", "ttsim": "whole_ttsim_"}

# records.CompilerIdentity's fields, each a `compiler_<field>` column of runs; compiler_key is its cache key
COMPILER_FIELDS = ("key", "spec", "package", "version", "library_sha256", "tt_metal_commit", "tt_mlir_commit",
                   "ttsim_version", "jax")

PHASE = pa.struct([pa.field("phase", pa.string()), pa.field("seconds", pa.float64())])

RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("started_at", TIMESTAMP, nullable=False),
    pa.field("ended_at", TIMESTAMP),
    pa.field("status", pa.string(), nullable=False),
    pa.field("models", pa.list_(pa.string())),
    pa.field("chip", pa.string()),
    pa.field("system_desc_sha256", pa.string()),
    pa.field("plugin_version", pa.string()),
    pa.field("opbyop_version", pa.string()),
    pa.field("git_sha", pa.string()),
    pa.field("options_key", pa.string()),
    pa.field("config", pa.string()),  # the AnalysisConfig as JSON
    pa.field("phases", pa.list_(PHASE)),  # where the run's wall time went, in order
    pa.field("mesh", pa.string()),  # the target's mesh of chips, ROWSxCOLS
    pa.field("topology", pa.string()),  # single | linear | ring | 2d | unknown
    # the compiler under test (records.CompilerIdentity): one run, one compiler
    *[pa.field(f"compiler_{name}", pa.string()) for name in COMPILER_FIELDS],
    pa.field("group_id", pa.string()),  # runs started together to be compared ("" alone)
    pa.field("verdict_code", pa.string()),  # the digest of opbyop's code that made its verdicts
])

OPS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("position", pa.int64(), nullable=False),
    pa.field("op_name", pa.string(), nullable=False),
    pa.field("signature", pa.string(), nullable=False),  # empty when the split failed
    pa.field("framework_op", pa.string()),
    pa.field("module_path", pa.string()),
    pa.field("aten_op", pa.string()),
    pa.field("source_file", pa.string()),
    pa.field("source_line", pa.int64()),
    pa.field("source_col", pa.int64()),
    pa.field("stack", pa.list_(SOURCE_FRAME)),
    pa.field("location", pa.string()),
    pa.field("inputs", pa.list_(TENSOR)),
    pa.field("outputs", pa.list_(TENSOR)),
    pa.field("operands", pa.list_(OPERAND)),
    pa.field("input_sources", pa.list_(VALUE_REF)),
    pa.field("attributes", pa.string()),  # JSON object
    pa.field("split_error", pa.string()),
    pa.field("mesh", pa.string()),  # the op's module's mesh ("x=2,y=4"); null on one device
    pa.field("operand_shardings", pa.list_(pa.string())),  # per module argument, Shardy's text
    pa.field("result_shardings", pa.list_(pa.string())),
])

RESULTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("signature", pa.string(), nullable=False),
    pa.field("op_name", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("fault", pa.string()),  # whose fault the status is (records.Fault); null in version-1 files
    pa.field("depth", pa.string(), nullable=False),
    pa.field("failed_stage", pa.string()),
    pa.field("message", pa.string()),
    pa.field("narrowing", pa.string()),  # a dtype the compiled program changed, by name
    *compile_fields(),
    *device_fields(),
    pa.field("pcc", pa.float64()),
    pa.field("max_abs_error", pa.float64()),
    pa.field("max_rel_error", pa.float64()),
    pa.field("allclose", pa.bool_()),
    pa.field("golden_passed", pa.bool_()),
    pa.field("pcc_threshold", pa.float64()),
    pa.field("golden_method", pa.string()),  # pcc | exact | allclose
    pa.field("golden_s", pa.float64()),
    pa.field("started_at", TIMESTAMP, nullable=False),
    pa.field("ended_at", TIMESTAMP, nullable=False),
    pa.field("worker", pa.string()),
    pa.field("reused_from", pa.string()),
    pa.field("compiler", pa.string()),  # the key of the compiler that compiled it (runs.compiler_key)
    pa.field("mesh", pa.string()),  # the target's mesh of chips, ROWSxCOLS
    pa.field("topology", pa.string()),
    pa.field("real_inputs", pa.list_(pa.string())),  # arguments with the model's own values (arg0 ..)
    pa.field("synthetic_inputs", pa.list_(pa.string())),  # arguments drawn from the seed
    *FAILED_PASS_FIELDS,
    *PASS_TIMING_FIELDS,
    pa.field("device_backend", pa.string()),  # whose run gave the device verdict: model | ttsim
    *ttsim_fields(),
])

# Occurrence counts of a model's ops, by the depth their unique op reached and by its status.
DEPTH_COUNT_COLUMNS = ("depth_split", "depth_stablehlo", "depth_ttir", "depth_ttnn", "depth_flatbuffer",
                       "depth_device_run", "depth_golden")
STATUS_COUNT_COLUMNS = tuple(f"status_{s.value}" for s in Status)

MODELS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("frontend", pa.string()),
    pa.field("ops_total", pa.int64()),
    pa.field("ops_unique", pa.int64()),
    pa.field("split_failures", pa.int64()),
    pa.field("export_s", pa.float64()),
    pa.field("export_reused", pa.bool_()),  # the export kept from an earlier run (nothing it read had changed)
    pa.field("error", pa.string()),
    *[pa.field(name, pa.int64()) for name in DEPTH_COUNT_COLUMNS],
    *[pa.field(name, pa.int64()) for name in STATUS_COUNT_COLUMNS],
    pa.field("ops_without_result", pa.int64()),  # split fine, but no result stored for its op
    pa.field("whole_status", pa.string()),
    pa.field("whole_depth", pa.string()),
    pa.field("whole_failed_stage", pa.string()),
    pa.field("whole_message", pa.string()),
    *compile_fields("whole_"),
    *device_fields("whole_"),
    pa.field("whole_pcc", pa.float64()),
    pa.field("whole_reference", pa.string()),  # framework | XLA:CPU
    pa.field("whole_max_abs_error", pa.float64()),
    pa.field("whole_iterations", pa.int64()),
    pa.field("whole_s", pa.float64()),
    pa.field("whole_key", pa.string()),  # what the whole-model result depends on (run.wholes.whole_key)
    pa.field("whole_reused_from", pa.string()),  # the run the whole-model result was taken from
    *ttsim_fields("whole_"),
    pa.field("module_artifact", pa.string()),  # the model's StableHLO module in the artifact store (sha256)
    *(field for prefix in TRACE_PREFIXES.values() for field in trace_fields(prefix)),
])

# One row per variant a shrink tried (opbyop.shrink): where a failing op starts failing. The op-level
# columns (op_*, shrink_*, summary) repeat on each of its rows; `boundary` marks the variant that is
# the largest passing or the smallest failing one of its dimension and dtype.
SHRINKS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("signature", pa.string(), nullable=False),  # the op shrunk
    pa.field("op_name", pa.string(), nullable=False),
    pa.field("op_dtype", pa.string()),
    pa.field("op_inputs", pa.list_(TENSOR)),
    pa.field("baseline_status", pa.string()),
    pa.field("dimension", pa.string(), nullable=False),  # "" for the op's own shape in another dtype
    pa.field("dtype", pa.string(), nullable=False),
    pa.field("size", pa.int64()),
    pa.field("size_as_found", pa.int64()),
    pa.field("variant_signature", pa.string()),  # null when the variant did not verify
    pa.field("inputs", pa.list_(TENSOR)),
    pa.field("outcome", pa.string(), nullable=False),  # pass | fail | no_verdict | rejected
    pa.field("status", pa.string()),
    pa.field("failed_stage", pa.string()),
    pa.field("message", pa.string()),
    pa.field("seconds", pa.float64()),
    pa.field("module_artifact", pa.string()),  # the variant's module in the artifact store
    pa.field("boundary", pa.string()),  # largest_passing | smallest_failing | null
    pa.field("shrink_s", pa.float64()),
    pa.field("shrink_budget_s", pa.float64()),
    pa.field("shrink_complete", pa.bool_()),
    pa.field("summary", pa.string()),  # the shrink's sentences, one per line
])

TABLES: dict[str, pa.Schema] = {"runs": RUNS, "ops": OPS, "results": RESULTS, "models": MODELS, "shrinks": SHRINKS}


def schema_fingerprint() -> str:
    """A short hash of every table's columns and their types (sorted `table:column:type` lines). The
    models' status_* counts are left out: they follow the Status enum (a new status is its entry
    alone), and a reader counts a status an older file lacks as 0."""
    lines = sorted(f"{table}:{field.name}:{field.type}" for table, schema in TABLES.items() for field in schema
                   if field.name not in STATUS_COUNT_COLUMNS)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def schema_of(table: str) -> pa.Schema:
    """The current schema of `table`, tagged with its name and the schema version."""
    return TABLES[table].with_metadata({VERSION_KEY: str(SCHEMA_VERSION).encode(), TABLE_KEY: table.encode()})


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema`'s column order and types; columns it lacks (older files) become nulls."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)
