"""Whose fault is a wrong number: the compiler's lowering, the chip's numerics, or opbyop's simulator.

Run only where the simulated device and XLA disagree. Three readings of the same compiled program:
- the reference reading (opbyop.device.reference, exact arithmetic, independent of the kernels)
  disagrees with XLA: the program itself is wrong, the compiler's lowering (`miscompiled`), named
  with the TTNN op where the reading leaves XLA's value; so is a value the compiler narrowed to a
  dtype that cannot hold it;
- the reference agrees, the simulator with the chip's numerics off does not: opbyop's simulator is
  wrong (`simulator_error`, never a finding), named with the first op whose kernel differs from
  the reference;
- both agree: only the chip's numerics remain (`golden_failed`), named with the data formats,
  fidelity and approximations the program uses and the error they cause.
A program the reference cannot read keeps the device's verdict and says it was not judged.
A program for a mesh of chips is judged the same way on its global values: the reference reads
every chip's program on its shard with the collectives in step (reference.read_mesh_program), the
simulator runs the mesh with the chip's numerics off, and a divergence names the chip it is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from opbyop.device.formats import BF16
from opbyop.device.mesh import Mesh, MeshError
from opbyop.device.mesh_runtime import resolve_shardings
from opbyop.device.program import Function, Op, Program
from opbyop.device.reference import Unreadable, read_mesh_program, read_program
from opbyop.device.reference.collectives import assemble_value, split_value
from opbyop.device.runtime import Binary, as_host_type
from opbyop.device.simulator import DeviceSimulator, SimulationError
from opbyop.golden.compare import Thresholds, compare, verdict
from opbyop.records import Status

_EXACT_FORMATS = {"f32", "si32", "u32", "u16", "u8", "i1"}


@dataclass(frozen=True)
class Judgment:
    status: Status
    message: str


def judge(binary: Binary, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], dtypes: list[str],
          thresholds: Thresholds, simulator: DeviceSimulator, device_verdict: str,
          narrowing: str | None = None, stablehlo: str | None = None, on_ttsim: bool = False) -> Judgment:
    """The status and message of an output that differs from XLA's (`device_verdict` says how).
    `stablehlo`, the op's module, says how a mesh program's global inputs split over its chips.
    `on_ttsim`: the outputs are tt-metal's kernels' on ttsim, not opbyop's simulator's, so once the
    program's exact reading agrees with XLA only the chip's numerics remain."""
    if narrowing and "not representable" in narrowing:
        return Judgment(Status.MISCOMPILED, f"the compiler narrowed a value its dtype cannot hold: {narrowing} "
                                            f"({device_verdict})")
    program = binary.program
    try:
        reading = _read(binary, inputs, stablehlo)
    except Unreadable as e:
        return Judgment(Status.GOLDEN_FAILED, f"{device_verdict} (not judged: the reference cannot read {e})")
    except Exception as e:  # a bug of the reference reading: said, and the device's verdict kept
        return Judgment(Status.GOLDEN_FAILED, f"{device_verdict} (not judged: the reference reading failed: "
                                              f"{type(e).__name__}: {e})")
    reference = reading.outputs
    against_xla = compare(reference, list(expected), dtypes, thresholds)
    if not against_xla.passed:
        where = _where_reference_leaves(program, reference, expected)
        narrowed = f"; the program narrowed {narrowing}" if narrowing else ""
        return Judgment(Status.MISCOMPILED, f"the compiled program computes a different value: its exact reading "
                                            f"differs from XLA ({verdict(against_xla)}){where}{narrowed}")
    if on_ttsim:
        return Judgment(Status.GOLDEN_FAILED, f"the chip's numerics ({chip_numerics(program)}), as tt-metal's kernels "
                                              f"compute them on ttsim, cause: {device_verdict}")
    trace: dict = {}
    try:
        exact, _ = simulator.run_binary(binary, inputs, stablehlo=stablehlo, chip_numerics=False, trace=trace)
    except Exception as e:  # SimulationError or a kernel's own exception: the simulator's, either way
        detail = str(e) if isinstance(e, SimulationError) else f"{type(e).__name__}: {e}"
        return Judgment(Status.SIMULATOR_ERROR, f"the simulator with the chip's numerics off failed where the "
                                                f"program's exact reading matches XLA: {detail}")
    exact_vs_xla = compare(exact, list(expected), dtypes, thresholds)
    # a replicated output is gathered from one chip: another chip's wrong copy shows only chip by chip
    if not exact_vs_xla.passed or _a_chips_output_differs(program, trace, reading.trace):
        op = first_divergence(trace, reading.trace)
        chip = _chip_of(trace, reading.trace, op)
        kernel = f"; the kernel of {_name(op)}{chip} first differs from the reference" if op is not None else ""
        return Judgment(Status.SIMULATOR_ERROR, f"opbyop's simulator is wrong: the program's exact reading matches "
                                                f"XLA, the simulator with the chip's numerics off does not "
                                                f"({verdict(exact_vs_xla)}){kernel}")
    return Judgment(Status.GOLDEN_FAILED, f"the chip's numerics ({chip_numerics(program)}) cause: {device_verdict}"
                                          f"{_where_numerics_part(binary, inputs, simulator, trace, thresholds, stablehlo)}")


@dataclass(frozen=True)
class _Reading:
    outputs: list[np.ndarray]  # as the runtime hands them over, global: a mesh program's gathered
    trace: dict  # value id (a mesh: (chip, value id)) -> (op, its first result)


def _read(binary: Binary, inputs: Sequence[np.ndarray], stablehlo: str | None) -> _Reading:
    """The reference reading of the program on `inputs`: one chip's, or every chip's of its mesh."""
    program = binary.program
    shape = program.mesh_shape
    if shape == (1, 1):
        reading = read_program(program, inputs)
        return _Reading(outputs=_host_outputs(reading.outputs, program.main), trace=reading.trace)
    try:
        shardings = resolve_shardings(binary, inputs, shape, stablehlo)
    except MeshError as e:
        raise Unreadable(f"how the mesh program's inputs split over its chips: {e}") from None
    # the reference's own block arithmetic, not the simulator's Sharding.shard/gather
    shards = [split_value(np.asarray(x), s.dims, shape) for s, x in zip(shardings.inputs, inputs)]
    mesh = Mesh(program.spec, shape)
    try:
        reading = read_mesh_program(program, mesh, [[per_input[chip] for per_input in shards]
                                                     for chip in range(mesh.size)])
    finally:
        mesh.close()
    chips = [_host_outputs(outputs, program.main) for outputs in reading.chip_outputs]
    outputs = [assemble_value([chip[k] for chip in chips], shardings.outputs[k].dims, shape)
               for k in range(len(program.main.returns))]
    return _Reading(outputs=outputs, trace=reading.trace)


def _a_chips_output_differs(program: Program, simulated: dict, reference: dict) -> bool:
    """A mesh program's output on some chip differs from the reference's reading of that chip."""
    returns = set(program.main.returns)
    return any(isinstance(key, tuple) and key[1] in returns and key in reference and not agree(got, reference[key][1])
               for key, (_, got) in simulated.items())


def _chip_of(simulated: dict, reference: dict, op: Op | None) -> str:
    """' on chip N' for a mesh trace's first divergence (keys (chip, value)); '' for one chip."""
    for key, (seen, got) in simulated.items():
        if seen is op and isinstance(key, tuple) and key in reference and not agree(got, reference[key][1]):
            return f" on chip {key[0]}"
    return ""


def _where_numerics_part(binary: Binary, inputs: Sequence[np.ndarray], simulator: DeviceSimulator,
                         exact: dict, thresholds: Thresholds, stablehlo: str | None = None) -> str:
    """'; first at <op> (<its error>)': the first op whose result with the chip's numerics no longer
    passes against the same kernel without them (a third run, only for this verdict)."""
    chip: dict = {}
    try:
        simulator.run_binary(binary, inputs, stablehlo=stablehlo, chip_numerics=True, trace=chip)
    except SimulationError:
        return ""
    for value, (op, got) in chip.items():
        held = np.asarray(got).dtype
        if value not in exact or not (held.kind == "f" or held == BF16):  # bf16 storage is ml_dtypes' bfloat16
            continue
        want = np.asarray(exact[value][1])
        t = op.result_types[op.results.index(value)] if value in op.results else None
        comparison = compare([got], [want], [t.dtype if t is not None else "f32"], thresholds)
        if not comparison.passed:
            where = f" on chip {value[0]}" if isinstance(value, tuple) else ""
            return f"; first at {_name(op)}{where}: {verdict(comparison).removeprefix('output mismatch: ')}"
    return ""


_HELD_AS = {"si32": np.int32, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8}


def _host_outputs(values: list[np.ndarray], main: Function) -> list[np.ndarray]:
    """The reference's outputs as the runtime hands them over: integers in the width the program
    holds them (a 64-bit value held as two 32-bit words is read back as such), then the framework's
    types."""
    hosts, held = main.host_return_types, main.return_types
    out = []
    for i, v in enumerate(values):
        t = held[i] if i < len(held) else None
        v = np.asarray(v)
        if t is not None and t.dtype in _HELD_AS and v.dtype.kind in "iu":
            v = v.astype(_HELD_AS[t.dtype])
        out.append(as_host_type(v, hosts[i] if i < len(hosts) else None))
    return out


def _name(op: Op) -> str:
    location = op.location if len(op.location) <= 80 else op.location[:77] + "..."
    return f"{op.name} ({location})"


def agree(a: np.ndarray, b: np.ndarray) -> bool:
    """Two readings of one value agree: integers and booleans exactly, floats to f32 precision."""
    a, b = np.asarray(a), np.asarray(b)
    if a.size != b.size:
        return False
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return bool(np.array_equal(a.reshape(-1).astype(np.int64), b.reshape(-1).astype(np.int64)))
    x, y = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    finite = np.abs(y[np.isfinite(y)])
    scale = float(finite.max()) if finite.size else 1.0
    return bool(np.allclose(x, y, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True))


def first_divergence(simulated: dict[int, tuple[Op, np.ndarray]], reference: dict[int, tuple[Op, np.ndarray]]) -> Op | None:
    """The first op, in the simulator's order, whose result differs from the reference's reading."""
    for value, (op, got) in simulated.items():
        if value in reference and not agree(got, reference[value][1]):
            return op
    return None


# Ops that only move, reshape or re-lay a value: a wrong value is never formed there.
_MOVES = {"ttnn.to_layout", "ttnn.reshape", "ttnn.squeeze", "ttnn.unsqueeze", "ttnn.to_memory_config",
          "ttnn.to_device", "ttnn.from_device", "ttnn.clone", "ttnn.assign"}


def _where_reference_leaves(program: Program, reference: list[np.ndarray], expected: Sequence[np.ndarray]) -> str:
    """'; it leaves XLA's value at <op>': from the first output that differs from XLA's, back through
    the ops that only move or re-lay it, the op of the entry that forms it (a const-eval function's
    value, the compiler's folding, is named by its load_cached)."""
    producers = {v: op for op in program.main.ops for v in op.results}
    for value, got, want in zip(program.main.returns, reference, expected):
        if np.iscomplexobj(want) or _agree_with_xla(got, np.asarray(want)):
            continue
        op = producers.get(value)
        while op is not None and op.name in _MOVES and op.operands:
            op = producers.get(op.operands[0])
        if op is not None:
            folded = f" (a value the compiler computed: @{str(op.attrs.get('callee', '')).lstrip('@')})" \
                if op.name == "ttcore.load_cached" else ""
            return f"; it leaves XLA's value at {_name(op)}{folded}"
    return ""


def _agree_with_xla(value: np.ndarray, want: np.ndarray) -> bool:
    try:
        return agree(np.asarray(value).reshape(want.shape), want)
    except (ValueError, TypeError):
        return False


def chip_numerics(program: Program) -> str:
    """The chip numerics the program uses: data formats other than exact ones, math fidelities,
    accumulation without f32, approximate modes ('bf16 storage, lofi fidelity')."""
    formats, fidelities, parts = set(), set(), []
    approximate = False
    for function in program.functions.values():
        for op in function.ops:
            for t in op.result_types + op.operand_types:
                if t is not None and t.storage not in _EXACT_FORMATS:
                    formats.add(t.storage)
            config = op.attrs.get("compute_config")
            if isinstance(config, dict):
                fidelities.add(str(config.get("math_fidelity", "hifi4")))
                if config.get("fp32_dest_acc_en") is False:
                    fidelities.add("no f32 accumulation")
            approximate |= any(op.attrs.get(k) is True for k in ("fast_and_approximate_mode", "approximate_mode",
                                                                  "approx"))
    if formats:
        parts.append(", ".join(sorted(formats)) + " storage")
    if fidelities:
        parts.append(", ".join(sorted(fidelities)) + " fidelity")
    if approximate:
        parts.append("approximate SFPU modes")
    return "; ".join(parts) or "f32 storage, SFPU and FPU arithmetic"
