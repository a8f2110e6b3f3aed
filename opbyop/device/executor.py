"""Execute one function of a TTNN program on the simulated device, op by op.

Values live in DeviceTensors (values already in their storage format, a buffer in DRAM or L1).
Every op's result is stored in the format its layout names (bf16 rounding, block floating point,
si32 ...), allocated where its layout says, and freed when the program deallocates it. Const-eval
functions run once per set of inputs and are cached on the device, as the runtime does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from opbyop.device.formats import BF16, store
from opbyop.device.kernels import KERNELS, STORAGE_KERNELS, Call
from opbyop.device.kernels.base import NotSimulated, Refused
from opbyop.device.memory import OutOfMemory
from opbyop.device.placement import PlacementError, Policy, nlp_targets, place
from opbyop.device.program import Function, Op, Program, TensorType
from opbyop.device.tensor import ConstEval, Device, DeviceTensor, host_layout
from opbyop.records import DeviceRun, OpPlacement, Status

# Ops the executor handles itself (no numerical kernel): memory, const-eval, control flow.
CONTROL_OPS = {"ttnn.deallocate", "ttnn.get_device", "ttcore.load_cached", "ttcore.while_loop", "ttcore.case"}
# A while loop that has not finished after this many iterations is reported, not run forever.
MAX_LOOP_ITERATIONS = 100_000


class SimulationError(Exception):
    """A run failure (the program ran out of memory, could not be placed ...): the device's verdict.
    Names the op and the reason; carries what was measured until then."""

    status = Status.RUN_FAILED  # whose fault: each subclass says

    def __init__(self, message: str, run: DeviceRun | None = None):
        super().__init__(message)
        self.run = run or DeviceRun(message=message)
        self.run.message = message


class NotSimulatedError(SimulationError):
    """The simulator lacks a TTNN op or feature the program uses: opbyop's gap, not the device's."""

    status = Status.NOT_SIMULATED


class SimulatorBugError(SimulationError):
    """A kernel of the simulator raised: a bug in opbyop, not a finding about the program."""

    status = Status.ANALYZER_ERROR


def unsupported_ops(program: Program) -> list[str]:
    """TTNN ops in the program that the simulator does not implement, sorted, each once."""
    return sorted({op.name for op in _all_ops(program) if op.name not in KERNELS and op.name not in CONTROL_OPS})


def _all_ops(program: Program) -> list[Op]:
    return [op for f in program.functions.values() for op in f.ops]


@dataclass
class RunStats:
    ttnn_ops: int = 0
    cycles: int = 0
    peak_l1: int = 0  # per core: resident L1 tensors plus the running op's circular buffers
    placements: list[OpPlacement] = field(default_factory=list)


class Executor:
    """Runs a program's functions on a device. `chip_numerics=False` runs the same kernels with the
    chip's numerics off (exact arithmetic: see kernels.base.Call); `record` keeps every op's first
    result values in `trace`, in execution order (to find where two readings of a program part);
    `observer` sees each compute op's outputs as they are made (opbyop.analysis.accuracy_trace)."""

    def __init__(self, device: Device, program: Program, policy: Policy = Policy.FEWEST_CYCLES,
                 chip_numerics: bool = True, record: bool = False,
                 observer: Callable[[Op, list[np.ndarray]], None] | None = None):
        self.device = device
        self.program = program
        self.policy = policy
        self.chip_numerics = chip_numerics
        self.record = record
        self.trace: dict[int, tuple[Op, np.ndarray]] = {}  # result value id -> (op, first value)
        self.stats = RunStats()
        self.observer = observer  # sees each compute op's outputs (opbyop.analysis.accuracy_trace)

    def run(self, function: Function, args: list[DeviceTensor]) -> list[DeviceTensor]:
        """Run `function`; every output comes back as a tensor the caller alone holds (refs 1).
        Whatever happens, the call's own references are dropped (a failed op leaks nothing)."""
        env: dict[int, DeviceTensor | None] = dict(zip(function.arguments, args))
        owned: set[int] = set()  # tensors this call holds a reference on
        for t in {id(t): t for t in args}.values():  # an argument passed twice is held once
            t.refs += 1
            owned.add(id(t))
        # the NLP policy matches each op's time to its neighbours': their best times, known up front
        targets = nlp_targets(function.ops, self.device.spec) if self.policy is Policy.NLP else [None] * len(function.ops)
        try:
            for op, target in zip(function.ops, targets):
                self._step(op, env, owned, target)
            return [self._own_output(env[v], owned) for v in function.returns if env[v] is not None]
        except (OutOfMemory, PlacementError, Refused) as e:
            raise SimulationError(str(e)) from None
        except NotSimulated as e:
            raise NotSimulatedError(f"not simulated: {e}") from None
        finally:
            for t in {id(t): t for t in env.values() if t is not None}.values():
                if id(t) in owned:
                    self.device.release(t)

    def _own_output(self, tensor: DeviceTensor, owned: set[int]) -> DeviceTensor:
        """The tensor itself if only this call holds it (its reference passes to the caller);
        else a copy: an argument or a cached constant returned as is stays with its holders."""
        if id(tensor) in owned and tensor.refs == 1:
            owned.discard(id(tensor))
            return tensor
        buffer = self.device.memory.allocate(tensor.layout, tensor.shape, f"copy of {tensor.name}")
        return DeviceTensor(values=tensor.values.copy(), dtype=tensor.dtype, layout=tensor.layout,
                            device=self.device, buffer=buffer, name=tensor.name)

    # -- one op ----------------------------------------------------------------------------
    def _step(self, op: Op, env: dict, owned: set[int], target_cycles: int | None = None) -> None:
        if op.name == "ttnn.get_device":
            env[op.results[0]] = None
            return
        if op.name == "ttnn.deallocate":
            tensor = env.get(op.operands[0])
            if tensor is not None and (id(tensor) in owned or op.attrs.get("force")):
                owned.discard(id(tensor))
                self.device.release(tensor, force=bool(op.attrs.get("force")))
            return
        if op.name in ("ttcore.load_cached", "ttcore.while_loop", "ttcore.case"):
            inputs = [env[v] for v in op.operands]
            results = {"ttcore.load_cached": self._const_eval, "ttcore.while_loop": self._while_loop,
                       "ttcore.case": self._case}[op.name](op, inputs)
            for v, t in zip(op.results, results):
                env[v] = t
                owned.add(id(t))
            return
        values = self.compute(op, [env.get(v) for v in op.operands])
        self.account(op, self.placement(op, target_cycles))
        self.bind(op, [self._materialise(value, t, f"{op.name} ({_short(op.location)})")
                       for value, t in zip(values, op.result_types)], env, owned)

    def compute(self, op: Op, inputs: list[DeviceTensor | None]) -> list[np.ndarray]:
        """The op's kernel on `inputs`: its result values, not yet stored on the device."""
        kernel = KERNELS.get(op.name)
        if kernel is None:
            raise NotSimulated(op.name)
        raw = op.name in STORAGE_KERNELS
        try:
            return kernel(Call(op=op, inputs=[None if t is None else t.values if raw else _computable(t.values)
                                              for t in inputs], out_types=op.result_types,
                               chip_numerics=self.chip_numerics))
        except (NotSimulated, Refused):
            raise
        except Exception as e:  # a gap in the simulator, named as such: never the whole run's end
            raise SimulatorBugError(f"simulator error in {op.name} ({_short(op.location)}): "
                                  f"{type(e).__name__}: {e}") from None

    def placement(self, op: Op, target_cycles: int | None = None) -> OpPlacement | None:
        """The op model chosen for `op` on this chip (None when the chip's numerics are off: such a
        run only judges values, with no op model, cycles or L1 to account)."""
        if not self.chip_numerics:
            return None
        return place(op, self.device.spec, self.policy, target_cycles, self.device.placements)

    def account(self, op: Op, placement: OpPlacement | None) -> None:
        """Count the op, its cycles and its circular buffers against this chip's L1."""
        self.stats.ttnn_ops += 1
        if placement is not None:
            self._check_l1(op, placement)
            self.stats.placements.append(placement)
            self.stats.cycles += placement.cycles

    def bind(self, op: Op, tensors: list[DeviceTensor], env: dict, owned: set[int]) -> None:
        """The op's result tensors become its result values on this chip."""
        for v, tensor in zip(op.results, tensors):
            env[v] = tensor
            owned.add(id(tensor))
            if self.record and v not in self.trace:
                self.trace[v] = (op, tensor.values)
        if self.observer is not None:
            self.observer(op, [env[v].values for v in op.results])

    def adopt(self, tensor: DeviceTensor, name: str) -> DeviceTensor:
        """A tensor holding the values another chip stored for the same op (already in their
        storage format, never written in place): only this chip's buffer is allocated."""
        buffer = self.device.memory.allocate(tensor.layout, tensor.shape, name)
        return DeviceTensor(values=tensor.values, dtype=tensor.dtype, layout=tensor.layout, device=self.device,
                            buffer=buffer, name=name)

    def _check_l1(self, op: Op, placement: OpPlacement) -> None:
        """An op's circular buffers must fit beside the L1 tensors resident on its cores."""
        buffers = placement.l1_bytes_per_core
        resident = self.device.memory.l1.fullest
        limit = self.device.spec.l1_per_core
        if resident + buffers > limit:
            rows, cols = placement.block_tiles
            fix = (f": the compiler's program config fixed its blocks ({rows}x{cols} output tiles at a time); "
                   "smaller out_block_h, out_block_w or in0_block_w need less" if placement.fixed_by_compiler else "")
            raise OutOfMemory(f"out of L1 memory: {op.name} ({_short(op.location)}) needs {buffers:,} B of circular "
                              f"buffers per core beside {resident:,} B of resident L1 tensors; a core has {limit:,} B"
                              f"{fix}")
        self.stats.peak_l1 = max(self.stats.peak_l1, resident + buffers)

    def _materialise(self, value: np.ndarray, t: TensorType | None, name: str) -> DeviceTensor:
        if t is None:
            raise NotSimulated(f"{name}: result without a tensor type")
        layout = t.layout or host_layout(t.dtype)
        # contiguous, as a device buffer is: a transposed view would make every later read copy it
        stored = store(np.ascontiguousarray(np.asarray(value).reshape(t.shape)), layout.dtype, self.chip_numerics)
        buffer = self.device.memory.allocate(layout, t.shape, name)
        return DeviceTensor(values=stored, dtype=t.dtype, layout=layout, device=self.device, buffer=buffer, name=name)

    def _const_eval(self, op: Op, args: list[DeviceTensor | None]) -> list[DeviceTensor]:
        entry = self.cached_constants(op, args)
        if entry is None:
            present = [a for a in args if a is not None]
            entry = self.remember_constants(op, args, self.run(self.callee(op.attrs["callee"]), present))
        for t in entry.results:
            t.refs += 1
        return entry.results

    def cached_constants(self, op: Op, args: list[DeviceTensor | None]) -> ConstEval | None:
        """A const-eval call's cached results on this device, if this very program ran it on these inputs."""
        entry = self.device.const_cache.get(self._const_key(op, args))
        present = [a for a in args if a is not None]
        # ids are reused once objects die: an entry counts only for this very program and inputs
        if entry is None or entry.program is not self.program or any(a is not b for a, b in zip(entry.args, present)):
            return None
        return entry

    def remember_constants(self, op: Op, args: list[DeviceTensor | None], results: list[DeviceTensor]) -> ConstEval:
        """Cache a const-eval call's results on the device (the cache holds a reference on each)."""
        entry = ConstEval(program=self.program, args=[a for a in args if a is not None], results=results)
        self.device.const_cache[self._const_key(op, args)] = entry
        return entry

    def _const_key(self, op: Op, args: list[DeviceTensor | None]) -> tuple:
        return (id(self.program), str(op.attrs["callee"]).lstrip("@"), tuple(id(a) for a in args if a is not None))

    # -- control flow (tt-mlir's ttcore.while_loop / ttcore.case call functions of the program) ----
    def callee(self, ref: object) -> Function:
        name = str(ref).lstrip("@")
        if name not in self.program.functions:
            raise NotSimulated(f"call of a function the program does not define: @{name}")
        return self.program.functions[name]

    def _while_loop(self, op: Op, operands: list[DeviceTensor | None]) -> list[DeviceTensor]:
        """StableHLO while. The first `state_count` operands are the loop's state, the rest values the
        body reads unchanged every iteration. Two forms: a condition program run on the state (the
        body runs while it says true), or a counted loop (`initial`, `limit`, `step` bounds, what
        tt-mlir emits for JAX's fori_loop: the body runs (limit - initial) / step times). The
        results are the state entries `output_indices` names; each is a tensor this op alone holds
        (a state passed through unchanged is copied, never aliased)."""
        body = self.callee(op.attrs["body_program"])
        bound = loop_iterations(op)
        condition = None if bound is not None else self.callee(op.attrs["condition_program"])
        present = [t for t in operands if t is not None]
        count = int(op.attrs.get("state_count") or len(present))
        invariant = present[count:]
        held: list[DeviceTensor] = []  # state tensors produced by the body: this op holds them
        current: list = present[:count]
        for iteration in range(MAX_LOOP_ITERATIONS):
            if bound is not None:
                go = iteration < bound
            else:
                flags = self.run(condition, current + invariant)
                go = bool(np.asarray(flags[0].values).reshape(-1)[0] != 0) if flags else False
                for t in flags:
                    self.device.release(t)
            if not go:
                break
            produced = self.run(body, current + invariant)
            for t in held:
                self.device.release(t)
            held = current = produced
        else:
            raise SimulationError(f"{op.name} ({_short(op.location)}) did not finish in {MAX_LOOP_ITERATIONS:,} "
                                  "iterations")
        indices = op.attrs.get("output_indices") or list(range(len(op.results)))
        results = [self._fresh(current[int(i)], held) for i in indices]
        for t in held:
            if all(t is not r for r in results):
                self.device.release(t)
        return results

    def _case(self, op: Op, inputs: list[DeviceTensor | None]) -> list[DeviceTensor]:
        """StableHLO case: the branch the index names; an index out of range takes the last branch."""
        index_tensor, operands = inputs[0], [t for t in inputs[1:] if t is not None]
        branches = op.attrs["branch_programs"]
        branches = branches if isinstance(branches, list) else [branches]
        index = int(np.asarray(index_tensor.values).reshape(-1)[0]) if index_tensor is not None else 0
        chosen = self.callee(branches[index if 0 <= index < len(branches) else -1])
        produced = self.run(chosen, operands)
        results = [self._fresh(t, produced) for t in produced]
        return results

    def _fresh(self, tensor: DeviceTensor, held: list[DeviceTensor]) -> DeviceTensor:
        """`tensor` itself when this op holds it (produced by a branch or body), else a copy."""
        if any(tensor is h for h in held):
            return tensor
        buffer = self.device.memory.allocate(tensor.layout, tensor.shape, f"copy of {tensor.name}")
        return DeviceTensor(values=tensor.values.copy(), dtype=tensor.dtype, layout=tensor.layout,
                            device=self.device, buffer=buffer, name=tensor.name)


def _computable(values: np.ndarray) -> np.ndarray:
    """Stored values as a computing kernel takes them: bf16 storage as its f32 values."""
    return values.astype(np.float32) if values.dtype == BF16 else values


def loop_iterations(op: Op) -> int | None:
    """How many times a counted ttcore.while_loop runs its body (`#ttcore.loop_bound<N>` bounds), or
    None for a loop with a condition program. A bound that is not a number is not simulated."""
    if "condition_program" in op.attrs:
        return None
    if "limit" not in op.attrs:
        raise NotSimulated(f"{op.name} with neither a condition program nor loop bounds: attributes {sorted(op.attrs)}")
    bounds = [op.attrs.get(k, d) for k, d in (("initial", 0), ("limit", 0), ("step", 1))]
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) or bounds[2] == 0:
        raise NotSimulated(f"{op.name} with loop bounds {bounds} (only constant, nonzero-step bounds are simulated)")
    initial, limit, step = bounds
    return max(0, -(-(limit - initial) // step))  # ceil((limit - initial) / step), either sign of step


def _short(location: str) -> str:
    return location if len(location) <= 80 else location[:77] + "..."


def run_stats(executor: Executor, seconds: float) -> DeviceRun:
    memory = executor.device.memory
    return DeviceRun(ttnn_ops=executor.stats.ttnn_ops, cycles=executor.stats.cycles,
                     peak_l1_bytes=max(memory.peak_l1_per_core, executor.stats.peak_l1), peak_dram_bytes=memory.peak_dram,
                     placements=executor.stats.placements, seconds=seconds)
