"""Run a TTNN mesh program on a mesh of simulated chips, op by op, all chips in step.

Every op but a collective runs on each chip's own shard with the single-chip executor (its
kernels, memory and placement). The chips run one program on same-shaped shards, so what does not
depend on the data is done once per op for the whole mesh (the op model and its cycles), and a chip
whose operands hold the same values as another's (replicated weights, what an all_reduce returned)
takes that chip's results instead of running the kernel again; each chip still allocates its own
DRAM and L1 for them and checks its own L1. A collective takes every chip's operands at once
(opbyop.device.kernels.ccl), puts its transfers on the links, and waits for the chips it joins:
each chip keeps its own clock, and a collective starts when the last chip of its group is ready.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np

from opbyop.device.executor import (
    CONTROL_OPS,
    Executor,
    NotSimulatedError,
    SimulationError,
    SimulatorBugError,
    _computable,
    _short,
)
from opbyop.device.kernels import KERNELS
from opbyop.device.kernels.base import NotSimulated
from opbyop.device.kernels.ccl import KERNELS as COLLECTIVES
from opbyop.device.kernels.ccl import MeshCall
from opbyop.device.memory import OutOfMemory
from opbyop.device.mesh import Mesh
from opbyop.device.placement import PlacementError, Policy
from opbyop.device.program import Function, Op, Program
from opbyop.device.tensor import DeviceTensor
from opbyop.records import CollectiveRun, DeviceRun


def mesh_unsupported_ops(program: Program) -> list[str]:
    """TTNN ops of a mesh program that neither a chip nor the mesh simulates, sorted, each once."""
    names = {op.name for f in program.functions.values() for op in f.ops}
    return sorted(n for n in names if n not in KERNELS and n not in CONTROL_OPS and n not in COLLECTIVES)


class MeshExecutor:
    def __init__(self, mesh: Mesh, program: Program, policy: Policy = Policy.FEWEST_CYCLES, share: bool = True,
                 chip_numerics: bool = True, record: bool = False,
                 observer: Callable[[Op, list[np.ndarray], int], None] | None = None):
        """`chip_numerics` and `record` as the single-chip Executor's, for every chip; `observer`
        sees each op's outputs on each chip (op, values, chip)."""
        self.mesh = mesh
        self.program = program
        self.share = share  # False runs every chip's every op in full (what sharing is measured against)
        self.observer = observer
        self.chips = [Executor(device, program, policy, chip_numerics=chip_numerics, record=record,
                               observer=None if observer is None else functools.partial(_on_chip, observer, chip))
                      for chip, device in enumerate(mesh.devices)]
        self.clocks = [0] * mesh.size  # cycles each chip has spent
        self.collectives: list[CollectiveRun] = []
        self.collective_seconds = 0.0  # wall time simulating them: what a mesh adds to its chips' runs

    def run(self, function: Function, args: list[list[DeviceTensor]]) -> list[list[DeviceTensor]]:
        """Run `function` with each chip's arguments; returns each chip's outputs (the caller holds
        them). The call's own references are dropped whatever happens."""
        envs: list[dict] = [dict(zip(function.arguments, chip_args)) for chip_args in args]
        owned: list[set[int]] = [set() for _ in self.chips]
        for chip, chip_args in enumerate(args):
            for t in {id(t): t for t in chip_args}.values():
                t.refs += 1
                owned[chip].add(id(t))
        try:
            for op in function.ops:
                if op.name in COLLECTIVES:
                    started = time.perf_counter()
                    try:
                        self._collective(op, envs, owned)
                    finally:
                        self.collective_seconds += time.perf_counter() - started
                    continue
                if self.share and op.name in KERNELS:
                    self._shared_step(op, envs, owned)
                    continue
                if self.share and op.name == "ttcore.load_cached" and self._shared_constants(op, envs, owned):
                    continue
                for chip, executor in enumerate(self.chips):
                    before = executor.stats.cycles
                    executor._step(op, envs[chip], owned[chip])
                    self.clocks[chip] += executor.stats.cycles - before
            return [[executor._own_output(envs[chip][v], owned[chip]) for v in function.returns
                     if envs[chip][v] is not None] for chip, executor in enumerate(self.chips)]
        except (OutOfMemory, PlacementError) as e:
            raise SimulationError(str(e)) from None
        except NotSimulated as e:
            raise NotSimulatedError(f"not simulated: {e}") from None
        finally:
            for chip, executor in enumerate(self.chips):
                for t in {id(t): t for t in envs[chip].values() if t is not None}.values():
                    if id(t) in owned[chip]:
                        executor.device.release(t)

    def _shared_step(self, op: Op, envs: list[dict], owned: list[set[int]]) -> None:
        """One compute op on every chip: placed once, its kernel run once per distinct operand values."""
        placement = self.chips[0].placement(op)
        where = f"{op.name} ({_short(op.location)})"
        # operands -> results, by a fingerprint of the operands: a chip compares its operands in full
        # only with those of chips whose fingerprint is the same (not with every chip's before it)
        done: dict[tuple, list[tuple[list[DeviceTensor | None], list[DeviceTensor]]]] = {}
        prints: dict[int, tuple] = {}  # by stored values: chips sharing a block print it once

        def fingerprint(t: DeviceTensor | None) -> tuple:
            if t is None:
                return ()
            if id(t.values) not in prints:
                prints[id(t.values)] = _fingerprint(t)
            return prints[id(t.values)]

        for chip, executor in enumerate(self.chips):
            inputs = [envs[chip].get(v) for v in op.operands]
            seen_alike = done.setdefault(tuple(fingerprint(t) for t in inputs), [])
            earlier = next((results for seen, results in seen_alike if _same_values(seen, inputs)), None)
            if earlier is None:
                values = executor.compute(op, inputs)
                executor.account(op, placement)
                tensors = [executor._materialise(v, t, where) for v, t in zip(values, op.result_types)]
                seen_alike.append((inputs, tensors))
            else:
                executor.account(op, placement)
                tensors = [executor.adopt(t, where) for t in earlier]
            executor.bind(op, tensors, envs[chip], owned[chip])
            self.clocks[chip] += placement.cycles if placement is not None else 0

    def _shared_constants(self, op: Op, envs: list[dict], owned: list[set[int]]) -> bool:
        """A const-eval call on every chip at once: its function run on the mesh (kernels shared as
        every op's) when no chip has it cached, from each chip's cache when every chip has. False
        when some chips have it and others not: each chip then runs it alone."""
        args = [[env.get(v) for v in op.operands] for env in envs]
        cached = [executor.cached_constants(op, chip_args) for executor, chip_args in zip(self.chips, args)]
        if any(entry is None for entry in cached) and any(entry is not None for entry in cached):
            return False
        if cached[0] is None:
            results = self.run(self.chips[0].callee(op.attrs["callee"]),
                               [[a for a in chip_args if a is not None] for chip_args in args])
            cached = [executor.remember_constants(op, chip_args, chip_results)
                      for executor, chip_args, chip_results in zip(self.chips, args, results)]
        for chip, entry in enumerate(cached):
            for v, t in zip(op.results, entry.results):
                t.refs += 1
                envs[chip][v] = t
                owned[chip].add(id(t))
        return True

    def _collective(self, op, envs: list[dict], owned: list[set[int]]) -> None:
        # bf16 storage reaches a collective as its f32 values, as it reaches every computing kernel
        inputs = [[_computable(t.values) if (t := env.get(v)) is not None else None for v in op.operands]
                  for env in envs]
        call = MeshCall(op=op, inputs=inputs, mesh=self.mesh)
        try:
            results, transfers = COLLECTIVES[op.name](call)
            groups = call.groups()
        except NotSimulated:
            raise
        except Exception as e:  # a gap in the simulator, never the whole run's end
            raise SimulatorBugError(f"simulator error in {op.name} ({_short(op.location)}): "
                                    f"{type(e).__name__}: {e}") from None
        traffic = self.mesh.cost(transfers)
        for group in groups:
            start = max(self.clocks[c] for c in group)
            for c in group:
                self.clocks[c] = start + traffic.cycles
        axis = op.attrs.get("cluster_axis")
        self.collectives.append(CollectiveRun(
            op=op.name, cluster_axis=int(axis) if axis is not None else None, group_size=len(groups[0]),
            payload_bytes=traffic.payload_bytes, link_bytes=traffic.link_bytes, hops=traffic.hops,
            cycles=traffic.cycles))
        where = f"{op.name} ({_short(op.location)})"
        stored: dict[int, DeviceTensor] = {}  # a value the kernel handed several chips is stored once
        for chip, executor in enumerate(self.chips):
            executor.account(op, None)  # a collective's cycles are the links', counted above
            tensors = []
            for value, t in zip(results[chip], op.result_types):
                first = stored.get(id(value)) if self.share else None
                tensor = executor.adopt(first, where) if first is not None else executor._materialise(value, t, where)
                stored.setdefault(id(value), tensor)
                tensors.append(tensor)
            executor.bind(op, tensors, envs[chip], owned[chip])

    def traces(self) -> dict[tuple[int, int], tuple[Op, np.ndarray]]:
        """Every chip's recorded results, keyed (chip, value id), in execution order chip by chip."""
        return {(chip, v): entry for chip, executor in enumerate(self.chips) for v, entry in executor.trace.items()}

    def stats(self, seconds: float) -> DeviceRun:
        """What the run did: the slowest chip's cycles, the largest per-chip peaks, each chip's
        peaks, and every collective's bytes and cycles."""
        l1 = [max(ex.device.memory.peak_l1_per_core, ex.stats.peak_l1) for ex in self.chips]
        dram = [ex.device.memory.peak_dram for ex in self.chips]
        first = self.chips[0]
        return DeviceRun(ttnn_ops=first.stats.ttnn_ops, cycles=max(self.clocks, default=0),
                         peak_l1_bytes=max(l1, default=0), peak_dram_bytes=max(dram, default=0),
                         placements=first.stats.placements, seconds=seconds, mesh_shape=list(self.mesh.shape),
                         topology=self.mesh.topology.value, chip_peak_l1_bytes=l1, chip_peak_dram_bytes=dram,
                         collectives=list(self.collectives),
                         collective_bytes=sum(c.payload_bytes for c in self.collectives),
                         collective_cycles=sum(c.cycles for c in self.collectives),
                         collective_seconds=self.collective_seconds)


def _on_chip(observer: Callable[[Op, list[np.ndarray], int], None], chip: int, op: Op,
             values: list[np.ndarray]) -> None:
    observer(op, values, chip)


def _same_values(a: list[DeviceTensor | None], b: list[DeviceTensor | None]) -> bool:
    """Two chips' operands hold the same stored values (the same arrays, or equal ones)."""
    return all(x is y or (x is not None and y is not None and _equal(x, y)) for x, y in zip(a, b))


def _fingerprint(t: DeviceTensor) -> tuple:
    """What tells most chips' shards apart at once: shape, dtype, first and last stored element."""
    u = t.values
    ends = (np.asarray(u.flat[0]).tobytes(), np.asarray(u.flat[-1]).tobytes()) if u.size else ()
    return (u.shape, u.dtype.str, *ends)


def _equal(x: DeviceTensor, y: DeviceTensor) -> bool:
    u, v = x.values, y.values
    if u is v:
        return x.layout == y.layout
    if u.shape != v.shape or u.dtype != v.dtype or x.layout != y.layout:
        return False
    return bool(np.array_equal(u, v))
