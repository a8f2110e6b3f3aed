"""The runtime API on a mesh: global tensors split over the chips as their sharding says, a mesh
program submitted to every chip at once, results gathered back.

    mesh = Mesh(spec, (1, 2))
    x = to_mesh(host, mesh, Sharding(((), (1,))), get_layout(binary, 0, 0))   # one shard per chip
    outs, run = submit_mesh(mesh, binary, 0, [x, w])                            # per chip outputs
    y = from_mesh(outs[0], mesh, Sharding.replicated(2))                        # the global result

The program a compiler emits for a mesh takes every argument presharded: which dimension of the
global tensor each chip's shard comes from is the module's sharding (Shardy's `#sdy.sharding`), not
the program's; without one it is inferred from the global and per-chip shapes.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from opbyop.boards import Topology
from opbyop.device.arch import DeviceSpec
from opbyop.device.executor import NotSimulatedError, SimulationError
from opbyop.device.layout import Layout
from opbyop.device.mesh import (
    LinkSpec,
    Mesh,
    MeshError,
    ModuleShardings,
    Sharding,
    infer_sharding,
    module_shardings,
)
from opbyop.device.mesh_executor import MeshExecutor, mesh_unsupported_ops
from opbyop.device.placement import Policy
from opbyop.device.program import TensorType
from opbyop.device.runtime import (
    Binary,
    as_host_type,
    count_to_host,
    get_layout,
    input_shape,
    place,
    stored_form,
    to_host,
    to_layout,
)
from opbyop.device.stitched_run import StitchedRun
from opbyop.device.tensor import DeviceTensor
from opbyop.device.transfers import TransferTotals
from opbyop.records import DeviceRun

ChipTensors = list[DeviceTensor]  # one tensor per chip, row-major


def to_mesh(host: np.ndarray, mesh: Mesh, sharding: Sharding, layout: Layout | None = None, name: str = "input",
            shape: tuple[int, ...] | None = None, chip_numerics: bool = True) -> ChipTensors:
    """Split a global host tensor into its shards and copy each to its chip. Chips that hold the same
    block (a replicated dimension) share its stored values: converted once, a buffer on each chip."""
    shards = sharding.shard(np.asarray(host), mesh.shape)
    converted: dict[int, tuple[np.ndarray, np.ndarray, Layout]] = {}
    tensors = []
    for i, (s, device) in enumerate(zip(shards, mesh.devices)):
        if id(s) not in converted:
            converted[id(s)] = stored_form(s, layout, shape, chip_numerics)
        tensors.append(place(*converted[id(s)], device, f"{name} (chip {i})"))
    return tensors


def from_mesh(tensors: ChipTensors, mesh: Mesh, sharding: Sharding) -> np.ndarray:
    """Copy every chip's shard back and assemble the global tensor."""
    return sharding.gather([to_host(t) for t in tensors], mesh.shape)


def submit_mesh(mesh: Mesh, binary: Binary, program_index: int, inputs: Sequence[ChipTensors],
                policy: Policy = Policy.FEWEST_CYCLES, share: bool = True, chip_numerics: bool = True,
                trace: dict | None = None, observer: Callable | None = None) -> tuple[list[ChipTensors], DeviceRun]:
    """Run a program on every chip of the mesh; returns each output as its chips' tensors, and the
    run's record. Inputs whose layout differs from the program's are converted first. `share=False`
    runs every chip's every op in full (see MeshExecutor); `chip_numerics=False` runs the kernels in
    exact arithmetic; `trace` is filled with every op's first result on each chip, keyed (chip, value);
    `observer` sees each op's outputs on each chip (op, values, chip)."""
    started = time.perf_counter()
    function = binary.function(program_index)
    if len(inputs) != len(function.arguments):
        raise ValueError(f"program {program_index} takes {len(function.arguments)} inputs, got {len(inputs)}")
    if binary.program.mesh_shape != mesh.shape:
        rows, cols = binary.program.mesh_shape
        raise SimulationError(f"the program was compiled for a {rows}x{cols} mesh, the simulated mesh is "
                              f"{mesh.shape[0]}x{mesh.shape[1]}")
    missing = mesh_unsupported_ops(binary.program)
    if missing:
        raise NotSimulatedError("not simulated: " + ", ".join(missing), DeviceRun(not_simulated=missing))
    expected = binary.input_types(program_index)
    converted: list[ChipTensors] = []
    for tensors, want in zip(inputs, expected):
        # the same layout object, mostly (to_mesh placed them as the program said): compared field by field only if not
        if want is not None and want.layout is not None and any(t.layout is not want.layout and t.layout != want.layout
                                                                for t in tensors):
            converted.append([to_layout(t, t.device, want.layout) for t in tensors])
        else:
            converted.append(list(tensors))
    executor = MeshExecutor(mesh, binary.program, policy, share, chip_numerics, record=trace is not None,
                            observer=observer)
    per_chip_args = [[arg[chip] for arg in converted] for chip in range(mesh.size)]
    try:
        per_chip = executor.run(function, per_chip_args)
    except SimulationError as e:
        e.run = executor.stats(time.perf_counter() - started).model_copy(update={"message": str(e)})
        raise
    finally:
        if trace is not None:
            trace.update(executor.traces())
        for original, used in zip(inputs, converted):
            for a, b in zip(original, used):
                if a is not b:
                    b.device.release(b)
    outputs = [[per_chip[chip][k] for chip in range(mesh.size)] for k in range(len(per_chip[0]) if per_chip else 0)]
    for tensors in outputs:
        for t in tensors:
            t.device.track(t)
    return outputs, executor.stats(time.perf_counter() - started)


def release(tensors: ChipTensors) -> None:
    for t in tensors:
        if t.device is not None and t.buffer is not None and not t.deallocated:
            t.device.release(t)


_RESULT_TYPES = re.compile(r"tensor<((?:\d+x)*)[a-z]\w*>")


def module_shapes(stablehlo: str) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Global shapes of @main's arguments and results, from the module's signature."""
    m = re.search(r"func\.func (?:public )?@main\((.*?)\)\s*->\s*(.*?)\{", stablehlo, re.DOTALL)
    if m is None:
        raise MeshError("the module has no @main", "pass a StableHLO module with func.func @main")

    def shapes(text: str) -> list[tuple[int, ...]]:
        text = re.sub(r"\{[^{}]*\}", "", text)  # drop attribute dictionaries (shardings hold no tensor<>)
        return [tuple(int(d) for d in g.split("x") if d) for g in _RESULT_TYPES.findall(text)]

    return shapes(m.group(1)), shapes(m.group(2))


@dataclass
class MeshShardings:
    inputs: list[Sharding]
    outputs: list[Sharding]


def resolve_shardings(binary: Binary, inputs: Sequence[np.ndarray], mesh_shape: tuple[int, int],
                      stablehlo: str | None = None) -> MeshShardings:
    """Each argument's and result's sharding: the module's where it says, else inferred from the
    global shape (the host value's, the module's result type) and the program's per-chip shape."""
    function = binary.function(0)
    declared = module_shardings(stablehlo) if stablehlo else ModuleShardings()
    _, result_shapes = module_shapes(stablehlo) if stablehlo else ([], [])
    ins = []
    for i, x in enumerate(inputs):
        given = declared.inputs[i] if i < len(declared.inputs) else None
        local = function.argument_types[i].shape if function.argument_types[i] is not None else np.shape(x)
        if tuple(local) == tuple(np.shape(x)):  # the program takes it whole (shard_status unsharded): every
            given = Sharding.replicated(len(local))  # chip gets it all; a ttnn.distribute_tensor splits it
        ins.append(given or infer_sharding(np.shape(x), local, mesh_shape))
    if stablehlo is None and function.return_types:
        raise MeshError("the program's results cannot be gathered without the module's shardings (a per-chip "
                        "result may be a shard or a replica)", "pass the StableHLO module the program was compiled from")
    outs = []
    for k, t in enumerate(function.return_types):
        given = declared.outputs[k] if k < len(declared.outputs) else None
        rank = len(t.shape) if t is not None else 0
        if given is None and k < len(result_shapes) and t is not None:
            given = infer_sharding(result_shapes[k], t.shape, mesh_shape)
        outs.append(given or Sharding.replicated(rank))
    return MeshShardings(inputs=ins, outputs=outs)


@dataclass
class MeshResult:
    outputs: list[np.ndarray]  # global, gathered
    chip_outputs: list[list[np.ndarray]]  # per output, per chip
    run: DeviceRun


class MeshSimulator:
    """Keeps one open mesh per (chip, shape, topology) and runs mesh programs on global inputs.
    `topology` is the target board's (None: a user's descriptor, whose links the shape suggests)."""

    def __init__(self, policy: Policy = Policy.FEWEST_CYCLES, topology: Topology | None = None,
                 link: LinkSpec | None = None, share: bool = True):
        self.policy, self.topology, self.link, self.share = policy, topology, link, share
        self._meshes: dict[tuple, Mesh] = {}

    def mesh_for(self, spec: DeviceSpec, shape: tuple[int, int]) -> Mesh:
        key = (spec, shape, self.topology, self.link)
        if key not in self._meshes:
            self._meshes[key] = Mesh(spec, shape, self.topology, self.link)
        return self._meshes[key]

    def run(self, program_text: str, inputs: Sequence[np.ndarray], stablehlo: str | None = None,
            shardings: MeshShardings | None = None) -> MeshResult:
        """Split `inputs` (global arrays) over the program's mesh, run, gather the results."""
        return self.run_binary(Binary.load(program_text), inputs, stablehlo, shardings)

    def run_binary(self, binary: Binary, inputs: Sequence[np.ndarray], stablehlo: str | None = None,
                   shardings: MeshShardings | None = None, chip_numerics: bool = True,
                   trace: dict | None = None) -> MeshResult:
        """`chip_numerics` and `trace` as submit_mesh's."""
        started = time.perf_counter()
        mesh = self.mesh_for(binary.program.spec, binary.program.mesh_shape)
        shardings = shardings or resolve_shardings(binary, inputs, mesh.shape, stablehlo)  # MeshError: the caller's
        for device in mesh.devices:
            device.memory.reset_peaks()
        pushed: list[ChipTensors] = []
        outputs: list[ChipTensors] = []
        try:
            for i, x in enumerate(inputs):
                pushed.append(to_mesh(x, mesh, shardings.inputs[i], get_layout(binary, 0, i), name=f"input {i}",
                                      shape=input_shape(binary, 0, i), chip_numerics=chip_numerics))
            outputs, run = submit_mesh(mesh, binary, 0, pushed, self.policy, self.share, chip_numerics, trace)
            for tensors in pushed:  # the inputs' shards are not needed any more: freed before the outputs come back
                release(tensors)
            pushed = []
            framework = binary.function(0).host_return_types
            chip_values, gathered = [], []
            for k, tensors in enumerate(outputs):
                host = _outputs_to_host(tensors, framework[k] if k < len(framework) else None)
                release(tensors)
                outputs[k] = []
                whole, views = shardings.outputs[k].gather_with_views(host, mesh.shape)
                gathered.append(whole)
                chip_values.append(views)
        except SimulationError as e:
            e.run.seconds = time.perf_counter() - started
            raise
        finally:
            for tensors in pushed + outputs:
                release(tensors)
            for device in mesh.devices:
                device.release_constants()
        return MeshResult(outputs=gathered, chip_outputs=chip_values,
                          run=run.model_copy(update={"seconds": time.perf_counter() - started}))

    def close(self) -> None:
        for mesh in self._meshes.values():
            mesh.close()
        self._meshes.clear()


def _outputs_to_host(tensors: ChipTensors, host_type: TensorType | None) -> list[np.ndarray]:
    """Every chip's output copied to the host; chips holding the very same stored values (a result
    one chip computed and the others adopted) share one host copy (each chip's transfer is counted)."""
    copies: dict[int, np.ndarray] = {}
    out = []
    for t in tensors:
        if id(t.values) not in copies:
            copies[id(t.values)] = as_host_type(to_host(t), host_type)
        else:
            count_to_host(t)
        out.append(copies[id(t.values)])
    return out


def _mesh_transfers(mesh: Mesh) -> TransferTotals:
    return functools.reduce(lambda a, b: a + b, (d.transfers.totals for d in mesh.devices))


def run_stitched_mesh(mesh: Mesh, binary: Binary, values: Sequence[np.ndarray], parameters: Sequence[int],
                      iterations: int = 2, stablehlo: str | None = None,
                      policy: Policy = Policy.FEWEST_CYCLES, observer: Callable | None = None) -> StitchedRun:
    """A whole sharded model on its mesh: each weight's shards pushed to their chips once, program 0
    run `iterations` times, activations never leaving the chips; the outputs gathered at the end.
    `observer` sees each op's outputs on each chip in the first iteration (op, values, chip)."""
    started = time.perf_counter()
    expected = len(binary.function(0).arguments)
    if expected != len(values):
        raise SimulationError(f"the compiled program takes {expected} arguments, the model has {len(values)}")
    try:
        shardings = resolve_shardings(binary, values, mesh.shape, stablehlo)
    except MeshError as e:
        raise SimulationError(f"cannot split the model's arguments over the mesh: {e}") from None
    for device in mesh.devices:
        device.memory.reset_peaks()

    def push(i: int, what: str) -> ChipTensors:
        return to_mesh(values[i], mesh, shardings.inputs[i], get_layout(binary, 0, i), name=f"{what} {i}",
                       shape=input_shape(binary, 0, i))

    before = _mesh_transfers(mesh)
    resident = {i: push(i, "weight") for i in parameters}
    pushed = sum(t.buffer.nbytes for ts in resident.values() for t in ts if t.buffer is not None)
    weight_transfers = _mesh_transfers(mesh) - before
    iteration_transfers: list[TransferTotals] = []
    runs: list[DeviceRun] = []
    outputs: list[ChipTensors] = []
    inputs: dict[int, ChipTensors] = {}
    try:
        for _ in range(max(1, iterations)):
            before = _mesh_transfers(mesh)
            for tensors in outputs:
                release(tensors)
            inputs = {i: push(i, "input") for i in range(len(values)) if i not in resident}
            outputs, run = submit_mesh(mesh, binary, 0, [resident.get(i) or inputs[i] for i in range(len(values))],
                                       policy, observer=observer if not runs else None)
            runs.append(run)
            for tensors in inputs.values():
                release(tensors)
            inputs = {}
            iteration_transfers.append(_mesh_transfers(mesh) - before)
        before = _mesh_transfers(mesh)
        host = [from_mesh(tensors, mesh, shardings.outputs[k]) for k, tensors in enumerate(outputs)]
        iteration_transfers[-1] = iteration_transfers[-1] + (_mesh_transfers(mesh) - before)
    finally:  # also after a failed program: release everything this run holds
        for tensors in [*outputs, *inputs.values(), *resident.values()]:
            release(tensors)
        for device in mesh.devices:
            device.release_constants()
    return StitchedRun(outputs=host, first=runs[0], steady=runs[-1], iterations=len(runs),
                       weight_bytes_pushed=pushed, seconds=time.perf_counter() - started,
                       weight_transfers=weight_transfers, iteration_transfers=iteration_transfers)
