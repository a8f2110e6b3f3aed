"""Run StableHLO modules on XLA:CPU through jax's public backend API, executables cached.

The process must have chosen its JAX platforms first (opbyop.jaxenv.prepare_jax), which also gives
XLA opbyop's flags: a single op is compiled once and run once, so XLA's LLVM optimisation costs
more than it saves (benchmarks/bench_golden.py: compile about 2x faster, outputs unchanged).

A sharded module (Shardy's mesh, num_partitions N) runs on a host mesh: N XLA:CPU devices (the
process must have been given them before JAX started: OPBYOP_HOST_DEVICES, opbyop.jaxenv), each
input split as the executable's parameter shardings say; its outputs come back per device shard and
gathered into the global value.

Executables are cached in memory by the op's signature and, with `cache_dir`, on disk (XLA's own
serialised executables, keyed by signature, jaxlib version and XLA flags): a warm run pays
deserialisation (under a millisecond) instead of compilation. The cache lives in the workspace,
written by opbyop alone: XLA documents that deserialising untrusted bytes is unsafe.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from opbyop.atomic import write_bytes
from opbyop.environment import Environment
from opbyop.errors import OpbyopError
from opbyop.golden.inputs import aligned_empty
from opbyop.golden.xla_rewrites import for_xla_cpu
from opbyop.ir.context import make_context
from opbyop.ir.mesh import module_mesh
from opbyop.ir.rewrite import main_func

# The flags opbyop gives XLA in its processes by default (environment variable OPBYOP_XLA_FLAGS
# overrides them; empty: XLA's defaults).
OPBYOP_XLA_FLAGS = "OPBYOP_XLA_FLAGS"
FAST_FLAGS = Environment.model_fields["xla_flags"].default


# Ops whose inputs exceed this many bytes are compiled with XLA's LLVM optimisation: unoptimised,
# the loops XLA emits for a large transpose run several times slower (a 14336x4096 bf16 transpose:
# 1.2 s against 0.25 s), which outweighs the compile time saved (benchmarks/bench_real_size.py).
OPTIMISE_ABOVE_BYTES = 1 << 26


# Sharded inputs above this many bytes are collected right after the run: jax's arrays sit in
# reference cycles, and uncollected the inputs' blocks (a 70B weight's: 2 GB) outlive the gathering of
# the outputs; a collection costs tens of milliseconds, nothing beside such an op.
COLLECT_ABOVE_BYTES = 1 << 26


# A host-mesh operand's blocks from this many bytes are handed to XLA:CPU in a form it uses in place
# (shared by every device holding the block); smaller ones it copies, sooner than opbyop could align them.
IN_PLACE_ABOVE_BYTES = 1 << 20


# Executables kept in memory (each ~190 KB for a small op: 4,096 of them held 0.75 GB in each op
# worker by the end of a run of 17,000 unique ops, each run once). One seen again is read back from
# the disk cache (`cache_dir`) in milliseconds.
CACHE_SIZE = 256


class XlaCpu:
    """Compile-once, run-many golden executor; the cache is keyed by the op's signature."""

    def __init__(self, cache_size: int = CACHE_SIZE, cache_dir: Path | None = None):
        import jax
        import jax.extend
        import jaxlib

        self._jax = jax
        self._backend = jax.extend.backend.get_backend("cpu")
        self._devices = self._backend.local_devices()
        self._device = self._devices[0]
        self._options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1)
        self._optimised = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1)
        self._optimised.executable_build_options.debug_options.xla_backend_optimization_level = 2
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._cache_size = cache_size
        self._cache_dir = cache_dir
        self._salt = f"{jaxlib.__version__}|{os.environ.get('XLA_FLAGS', '')}"
        self.compiles = 0
        self._ir_context = None  # parses sharded modules' result types: a new context costs 2 ms per run

    def executable(self, module_text: str, key: str | None = None, optimised: bool = False) -> object:
        """The compiled module, from memory, from the disk cache, or compiled now (`optimised`: with
        XLA's LLVM optimisation, whatever the process's flags say)."""
        key = (key or hashlib.sha256(module_text.encode()).hexdigest()) + ("|optimised" if optimised else "")
        exe = self._cache.get(key)
        if exe is not None:
            self._cache.move_to_end(key)
            return exe
        devices, options = self._placement(module_text)
        if optimised and len(devices) == 1:
            options = self._optimised
        exe = self._load(key, devices, options)
        if exe is None:
            # ops XLA:CPU lacks (collective_broadcast) as ops it has that compute the same values
            exe = self._backend.compile_and_load(for_xla_cpu(module_text), devices, options)
            self.compiles += 1
            self._save(key, exe)
        self._cache[key] = exe
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return exe

    def _placement(self, module_text: str) -> tuple[list, object]:
        """The devices and compile options of a module: one device, or a host mesh for a sharded one."""
        mesh = module_mesh(module_text)
        count = mesh.devices if mesh is not None else 1
        if count == 1:
            return [self._device], self._options
        if count > len(self._devices):
            raise OpbyopError(
                f"the module is sharded over {count} devices ({mesh}), but this process's XLA:CPU has "
                f"{len(self._devices)}", f"give the process {count} (or more) host devices when JAX starts: prepare_jax(host_devices=...), "
                "OpWorker(host_devices=...); opbyop's commands do so from --chip and --mesh")
        import jax.extend

        options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=count)
        options.executable_build_options.use_spmd_partitioning = True
        return self._devices[:count], options

    def execute(self, exe: object, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        buffers = [self._jax.device_put(np.asarray(x), self._device) for x in inputs]
        results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()  # type: ignore[attr-defined]
        return [np.asarray(r[0]) for r in results]

    def execute_sharded(self, exe: object, inputs: Sequence[np.ndarray],
                        shapes: Sequence[tuple[int, ...]]) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """Run a host-mesh executable on global `inputs`: (gathered outputs of global `shapes`, each
        output's shards in device order)."""
        from jax._src.sharding_impls import GSPMDSharding

        devices = list(exe.local_devices())  # type: ignore[attr-defined]
        # an executable loaded from the disk cache says None, not [], for a module without arguments
        in_shardings = exe.get_parameter_shardings() or []  # type: ignore[attr-defined]
        out_shardings = exe.get_output_shardings()  # type: ignore[attr-defined]
        buffers = [self.put_on_mesh(np.asarray(x), GSPMDSharding(devices, s)) for x, s in zip(inputs, in_shardings)]
        results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()  # type: ignore[attr-defined]
        del buffers
        if sum(np.asarray(x).nbytes for x in inputs) > COLLECT_ABOVE_BYTES:
            gc.collect()
        gathered, shards = [], []
        for k, (sharding, shape) in enumerate(zip(out_shardings, shapes)):
            per_device, results[k] = results[k], None  # each output's device buffers go once it is read
            full = np.empty(shape, dtype=np.asarray(per_device[0]).dtype)
            where = GSPMDSharding(devices, sharding).devices_indices_map(tuple(shape))
            local: list[np.ndarray] = []
            filled: dict[tuple, np.ndarray] = {}  # block -> its view into the gathered value
            for device, buffer in zip(devices, per_device):
                piece = np.asarray(buffer)
                # a replicated part is read from the first device holding it, as the mesh simulator
                # reads it from the first chip; a device that holds it too keeps its own piece only
                # where it differs (a shard_map's output declared replicated), else shares the view
                key = _block_key(where[device])
                if key not in filled:
                    full[where[device]] = piece
                    filled[key] = full[where[device]]
                    local.append(filled[key])
                else:
                    local.append(filled[key] if np.array_equal(piece, filled[key]) else piece)
            del per_device
            gathered.append(full)
            shards.append(local)
        return gathered, shards

    def put_on_mesh(self, x: np.ndarray, sharding: object) -> object:
        """`x` on the host mesh as `sharding` splits it. XLA:CPU uses an aligned contiguous host array
        in place, so each distinct block is made once and every device holding it shares it: a block
        replicated on n devices costs its bytes once, not n times (Llama 70B's embedding split over a
        Galaxy's 4 rows, replicated along its 8 columns: 2 GB, not 17). One call puts every device's
        block (a device_put per device cost 1 ms per operand on a 32-device mesh, this 0.1 ms)."""
        blocks: dict[tuple, np.ndarray] = {}

        def block(index: tuple) -> np.ndarray:
            key = _block_key(index)
            if key not in blocks:
                piece = np.asarray(x[index])
                # a small block is copied by XLA at no cost worth saving; a large one is used in place
                blocks[key] = piece if piece.nbytes < IN_PLACE_ABOVE_BYTES else _in_place_form(piece)
            return blocks[key]

        return self._jax.make_array_from_callback(x.shape, sharding, block)

    def run_sharded(self, module_text: str, inputs: Sequence[np.ndarray],
                    key: str | None = None) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """A sharded module on the host mesh: (gathered outputs, per-device shards of each output)."""
        exe = self.executable(module_text, key)
        if len(exe.local_devices()) == 1:  # type: ignore[attr-defined]
            outputs = self.execute(exe, inputs)
            return outputs, [[o] for o in outputs]
        return self.execute_sharded(exe, inputs, self._result_shapes(module_text))

    def run(self, module_text: str, inputs: Sequence[np.ndarray], key: str | None = None) -> list[np.ndarray]:
        """Execute the module's @main on `inputs`; returns its results as numpy arrays (a sharded
        module's gathered from the host mesh). Ops with large inputs are compiled with XLA's LLVM
        optimisation: unoptimised, a 14336x4096 transpose took 1.2 s instead of 0.25 s."""
        large = sum(np.asarray(x).nbytes for x in inputs) > OPTIMISE_ABOVE_BYTES
        exe = self.executable(module_text, key, optimised=large)
        if len(exe.local_devices()) > 1:  # type: ignore[attr-defined]
            return self.execute_sharded(exe, inputs, self._result_shapes(module_text))[0]
        return self.execute(exe, inputs)

    def _result_shapes(self, module_text: str) -> list[tuple[int, ...]]:
        if self._ir_context is None:
            self._ir_context = make_context()
        return result_shapes(module_text, self._ir_context)

    # -- the disk cache --------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        if self._cache_dir is None:
            return None
        digest = hashlib.sha256(f"{self._salt}|{key}".encode()).hexdigest()
        return self._cache_dir / digest[:2] / f"{digest}.xla"

    def _load(self, key: str, devices: list, options: object) -> object | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            return self._backend.deserialize_executable(path.read_bytes(), devices, options)
        except Exception:  # a truncated or stale entry: compile again (and overwrite it)
            return None

    def _save(self, key: str, exe: object) -> None:
        path = self._path(key)
        if path is None:
            return
        try:
            write_bytes(path, exe.serialize())  # type: ignore[attr-defined]
        except OSError:  # a full disk costs the cache, never the op (and leaves no partial file)
            return



def _block_key(index: tuple) -> tuple:
    """A block's slices as a dictionary key (slices are not hashable)."""
    return tuple((s.start, s.stop, s.step) if isinstance(s, slice) else s for s in index)


def _in_place_form(block: np.ndarray, alignment: int = 64) -> np.ndarray:
    """`block` as XLA:CPU can use it without a copy: C-contiguous at an aligned address."""
    if block.flags.c_contiguous and block.ctypes.data % alignment == 0:
        return block
    out = aligned_empty(block.shape, block.dtype, alignment)
    out[...] = block
    return out


def result_shapes(module_text: str, context: object | None = None) -> list[tuple[int, ...]]:
    """The global shapes @main returns (a host-mesh run gets only per-device shards back), parsed in
    `context` (an MLIR context that knows StableHLO and Shardy) or a new one."""
    from jaxlib.mlir import ir

    with context or make_context():
        module = ir.Module.parse(module_text)
        main = main_func(module, "module")
        return [tuple(ir.RankedTensorType(t).shape) for t in ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results]
