"""The runtime API for on-device tensors (as tt-mlir's runtime has it).

    device = open_device(spec)
    weights = [to_device(w, device, get_layout(binary, 0, i)) for i, w in ...]   # pushed once
    outs = submit(device, binary, 0, inputs + weights)   # non-blocking: device tensors
    wait(outs); host = to_host(outs[0])                   # the device copy stays allocated
    deallocate(outs[0])                                    # freed at reference count zero

`submit` converts inputs whose layout differs from what the program expects, moves L1 tensors
the program does not use out to DRAM, and runs on the device's command queue (one thread), so
the caller gets device tensors back at once and can enqueue the next program, e.g. a second
model fed by the first one's outputs without a host round trip.

Every host <-> device copy (to_device, to_host) and every L1 eviction is counted on
`device.transfers` (opbyop.device.transfers): what a stitched run saves is measured, not assumed.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
from jaxlib.mlir import ir

from opbyop.device.arch import DeviceSpec
from opbyop.device.executor import Executor, NotSimulatedError, SimulationError, run_stats, unsupported_ops
from opbyop.device.formats import store
from opbyop.device.layout import DRAM_ROW_MAJOR, Layout
from opbyop.device.memory import OutOfMemory
from opbyop.device.placement import Policy
from opbyop.device.program import Program, TensorType, load_program
from opbyop.device.tensor import Device, DeviceTensor, host_layout
from opbyop.dtypes import mlir_dtype, numpy_dtype
from opbyop.records import DeviceRun

__all__ = ["Binary", "Device", "DeviceTensor", "deallocate", "get_layout", "host_layout", "open_device", "submit",
           "to_device", "to_host", "to_layout", "wait"]

# Host element types the device holds in another format (no f64/i64 on Tensix; unsigned spelt u*).
_HOST_FORMAT = {"i64": "si32", "i32": "si32", "f64": "f32", "i1": "bf16", "ui32": "u32", "ui16": "u16", "ui8": "u8"}


@dataclass
class Binary:
    """A compiled program, loaded once, runnable many times."""

    program: Program
    flatbuffer: bytes | None = None

    @classmethod
    def load(cls, ttnn_runtime_mlir: str, flatbuffer: bytes | None = None, ctx: ir.Context | None = None) -> Binary:
        """The program parsed (in `ctx`, else a context of its own)."""
        return cls(load_program(ttnn_runtime_mlir, ctx), flatbuffer)

    @property
    def program_names(self) -> list[str]:
        names = [n for n, f in self.program.functions.items() if f.kind == "forward_device" and n != self.program.entry]
        return [self.program.entry] + names

    def function(self, program_index: int):
        try:
            return self.program.functions[self.program_names[program_index]]
        except IndexError:
            raise IndexError(f"program {program_index} out of range: the binary has {len(self.program_names)}") from None

    def input_types(self, program_index: int) -> list[TensorType | None]:
        return self.function(program_index).argument_types


def open_device(spec: DeviceSpec) -> Device:
    return Device(spec)


def close_device(device: Device) -> None:
    device.close()


def to_device(host: np.ndarray, device: Device, layout: Layout | None = None, name: str = "input",
              shape: tuple[int, ...] | None = None, chip_numerics: bool = True) -> DeviceTensor:
    """Copy a host array to the device (default: DRAM interleaved, row-major). `shape`, the shape
    the program declares for it, says when the runtime must split each value in two words first.
    `chip_numerics=False` keeps float values unrounded (formats.store)."""
    host, values, layout = stored_form(host, layout, shape, chip_numerics)
    return place(host, values, layout, device, name)


def stored_form(host: np.ndarray, layout: Layout | None, shape: tuple[int, ...] | None,
                chip_numerics: bool) -> tuple[np.ndarray, np.ndarray, Layout]:
    """(the host array as the runtime sends it, its values as the device stores them, their layout)."""
    host = np.asarray(host)
    if shape is not None and tuple(shape) == host.shape + (2,):
        host = in_words(host)
    fmt = _HOST_FORMAT.get(mlir_dtype(host.dtype), mlir_dtype(host.dtype))
    layout = layout or DRAM_ROW_MAJOR.with_(dtype=fmt)
    return host, store(host, layout.dtype, chip_numerics), layout


def place(host: np.ndarray, values: np.ndarray, layout: Layout, device: Device, name: str) -> DeviceTensor:
    """Stored `values` sent from `host` into a new buffer of `device` (several chips may hold the same
    values: they are never written in place)."""
    try:
        buffer = device.memory.allocate(layout, values.shape, name)
    except OutOfMemory as e:
        raise SimulationError(str(e)) from None
    if layout.on_device:
        device.transfers.count("to_device", name, layout.nbytes(values.shape), host)
    return device.track(DeviceTensor(values=values, dtype=layout.dtype, layout=layout, device=device,
                                     buffer=buffer, name=name))


def in_words(host: np.ndarray) -> np.ndarray:
    """What the chip lacks, held as a trailing dimension of 2 (what tt-mlir compiles it to): a complex
    value as (real, imaginary) f32, a 64-bit integer as its (low, high) 32-bit words."""
    if np.iscomplexobj(host):
        return np.stack([host.real, host.imag], axis=-1).astype(np.float32)
    if host.dtype.kind in "iu" and host.dtype.itemsize == 8:
        return np.ascontiguousarray(host).view(np.uint32).reshape(host.shape + (2,))  # little-endian: low first
    raise ValueError(f"no two-word form of {host.dtype} values")


def as_host_type(values: np.ndarray, host: TensorType | None) -> np.ndarray:
    """A program output as the runtime hands it to the framework, in the type the program records
    for it (`ttcore.local_shape`), converted elementwise as C++'s static_cast does: a boolean held
    as bf16 is true when nonzero, an i8 computed as si32 keeps its low byte. Values held as two
    words (complex, 64-bit integers) keep their trailing dimension of 2."""
    # a rank-0 value the device holds as one element ([1]) is converted too
    scalar = host is not None and values.size == 1 and int(np.prod(host.shape)) == 1
    if host is None or (tuple(values.shape) != tuple(host.shape) and not scalar):
        return values
    try:
        dtype = numpy_dtype(host.dtype)
    except ValueError:
        return values
    if values.dtype == dtype:
        return values
    if dtype == np.bool_:
        return values != 0
    if dtype.kind in "iu":
        if values.dtype.kind == "f":
            values = np.trunc(np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0))
        return values.astype(np.int64).astype(dtype)  # modulo 2**bits, as a two's complement cast
    return values.astype(dtype)


def input_shape(binary: Binary, program_index: int, input_index: int) -> tuple[int, ...] | None:
    """The shape program `program_index` declares for input `input_index`."""
    t = binary.input_types(program_index)[input_index]
    return t.shape if t is not None else None


def wait(x: DeviceTensor | Iterable[DeviceTensor] | concurrent.futures.Future) -> None:
    """Block until the tensor(s) or event are ready; re-raise a failed program's error."""
    if isinstance(x, concurrent.futures.Future):
        x.result()
        return
    for t in [x] if isinstance(x, DeviceTensor) else list(x):
        if t.ready is not None:
            t.ready.result()


def to_host(tensor: DeviceTensor, untilize: bool = True) -> np.ndarray:
    """Wait for the tensor and copy it to the host; the device copy stays allocated."""
    return np.array(count_to_host(tensor), copy=True)


def count_to_host(tensor: DeviceTensor) -> np.ndarray:
    """The tensor's transfer to the host, counted; its stored values, not copied (never to be written)."""
    wait(tensor)
    if tensor.deallocated:
        raise SimulationError(f"to_host of {tensor.name}: its device buffer was deallocated")
    if tensor.device is not None and tensor.layout.on_device:
        tensor.device.transfers.count("to_host", tensor.name, tensor.layout.nbytes(tensor.shape), tensor.values)
    return tensor.values


def get_layout(binary: Binary, program_index: int, input_index: int) -> Layout:
    """The layout program `program_index` expects for input `input_index`."""
    t = binary.input_types(program_index)[input_index]
    return t.layout if t is not None and t.layout is not None else DRAM_ROW_MAJOR


def to_layout(tensor: DeviceTensor, device: Device, layout: Layout, retain: bool = True,
              chip_numerics: bool = True) -> DeviceTensor:
    """A NEW tensor in `layout` (never in place); the source is released unless `retain`."""
    wait(tensor)
    values = store(tensor.values, layout.dtype, chip_numerics)
    try:
        buffer = device.memory.allocate(layout, values.shape, f"{tensor.name} as {layout.buffer}")
    except OutOfMemory as e:
        raise SimulationError(str(e)) from None
    out = device.track(DeviceTensor(values=values, dtype=layout.dtype, layout=layout, device=device,
                                    buffer=buffer, name=tensor.name))
    if not retain:
        deallocate(tensor)
    return out


def deallocate(tensor: DeviceTensor, force: bool = False) -> None:
    """Drop one reference; the buffer is freed at zero, or now when forced."""
    if tensor.device is not None:
        wait(tensor)
        tensor.device.release(tensor, force=force)


def submit(device: Device, binary: Binary, program_index: int, inputs: Sequence[DeviceTensor],
           policy: Policy = Policy.FEWEST_CYCLES, chip_numerics: bool = True,
           trace: dict | None = None, observer: Callable | None = None) -> list[DeviceTensor]:
    """Enqueue a program; returns its output tensors at once (they become ready when it ends).
    `chip_numerics=False` runs it with the chip's numerics off; a `trace` dict receives every op's
    first result values, keyed by result value id (Executor.trace); `observer` sees each op's outputs."""
    function = binary.function(program_index)
    if len(inputs) != len(function.arguments):
        raise ValueError(f"program {program_index} takes {len(function.arguments)} inputs, got {len(inputs)}")
    missing = unsupported_ops(binary.program)
    if missing:
        raise NotSimulatedError("not simulated: " + ", ".join(missing), DeviceRun(not_simulated=missing))
    # placeholders until the run fills them: shaped, holding no memory
    outputs = [DeviceTensor(values=np.broadcast_to(np.float32(0), t.shape if t else ()), dtype=t.dtype if t else "f32",
                            layout=(t.layout if t and t.layout else DRAM_ROW_MAJOR), device=device, name=f"output {i}")
               for i, t in enumerate(function.return_types)]
    future = device._queue.submit(_execute, device, binary, program_index, list(inputs), policy, outputs,
                                  chip_numerics, trace, observer)
    for t in outputs:
        t.ready = future
    return outputs


def _fill(placeholders: list[DeviceTensor], results: list[DeviceTensor]) -> None:
    """Hand each result's state to the tensor the caller already holds (each result has one holder)."""
    for placeholder, real in zip(placeholders, results):
        placeholder.values, placeholder.dtype, placeholder.layout = real.values, real.dtype, real.layout
        placeholder.buffer, placeholder.refs = real.buffer, real.refs
        placeholder.device.track(placeholder)


def _execute(device: Device, binary: Binary, program_index: int, inputs: list[DeviceTensor],
             policy: Policy, outputs: list[DeviceTensor], chip_numerics: bool = True,
             trace: dict | None = None, observer: Callable | None = None) -> DeviceRun:
    """Run the program into `outputs`; the future's result is the run's figures only (the outputs
    hold the future: a future holding them back would be a reference cycle, and a gigabyte output
    would outlive its last user until the garbage collector's next pass)."""
    started = time.perf_counter()
    wait(inputs)
    expected = binary.input_types(program_index)
    converted = []
    for i, (t, want) in enumerate(zip(inputs, expected)):
        if want is not None and want.layout is not None and (t.layout != want.layout):
            converted.append(to_layout(t, device, want.layout, chip_numerics=chip_numerics))  # converted copy, dropped after the run
        else:
            converted.append(t)
    _evict_l1(device, keep={id(t) for t in converted})
    executor = Executor(device, binary.program, policy, chip_numerics=chip_numerics, record=trace is not None,
                        observer=observer)
    try:
        results = executor.run(binary.function(program_index), converted)
    except SimulationError as e:
        e.run = run_stats(executor, time.perf_counter() - started).model_copy(update={"message": str(e)})
        raise
    finally:
        if trace is not None:
            trace.update(executor.trace)
        for original, used in zip(inputs, converted):
            if used is not original:
                device.release(used)
    _fill(outputs, results)  # before the future resolves: waiters see filled tensors
    run = run_stats(executor, time.perf_counter() - started)
    device.runs.append(run)
    return run


def _evict_l1(device: Device, keep: set[int]) -> None:
    """Move L1 tensors this program does not use out to DRAM, making room for it."""
    for t in list(device.live.values()):
        if id(t) in keep or t.buffer is None or t.buffer.buffer_type != "l1" or t.ready is not None and not t.ready.done():
            continue
        layout = t.layout.with_(buffer="dram", memory_layout="interleaved", grid=(1, 1))
        buffer = device.memory.allocate(layout, t.shape, f"{t.name} (evicted from L1)")
        device.memory.free(t.buffer)
        t.buffer, t.layout = buffer, layout
        device.transfers.evicted(buffer.nbytes if buffer is not None else 0)


def run_of(tensor: DeviceTensor) -> DeviceRun:
    """What the program that produced `tensor` did: cycles, placements, peak memory (waits)."""
    if tensor.ready is None:
        raise ValueError(f"{tensor.name} was not produced by submit")
    return tensor.ready.result()
