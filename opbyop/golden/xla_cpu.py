"""Run StableHLO modules on XLA:CPU through jax's public backend API, executables cached.

The process must have chosen its JAX platforms first (opbyop.jaxenv.prepare_jax), which also gives
XLA opbyop's flags: a single op is compiled once and run once, so XLA's LLVM optimisation costs
more than it saves (benchmarks/bench_golden.py: compile about 2x faster, outputs unchanged).

Executables are cached in memory by the op's signature and, with `cache_dir`, on disk (XLA's own
serialised executables, keyed by signature, jaxlib version and XLA flags): a warm run pays
deserialisation (under a millisecond) instead of compilation. The cache lives in the workspace,
written by opbyop alone: XLA documents that deserialising untrusted bytes is unsafe.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from opbyop.atomic import write_bytes
from opbyop.environment import Environment, environment

# The flags opbyop gives XLA in its processes by default (environment variable OPBYOP_XLA_FLAGS
# overrides them; empty: XLA's defaults).
OPBYOP_XLA_FLAGS = "OPBYOP_XLA_FLAGS"
FAST_FLAGS = Environment.model_fields["xla_flags"].default


# Ops whose inputs exceed this many bytes are compiled with XLA's LLVM optimisation: unoptimised,
# the loops XLA emits for a large transpose run several times slower (a 14336x4096 bf16 transpose:
# 1.2 s against 0.25 s), which outweighs the compile time saved (benchmarks/bench_real_size.py).
OPTIMISE_ABOVE_BYTES = 1 << 26


def opbyop_xla_flags() -> str:
    return environment().xla_flags


class XlaCpu:
    """Compile-once, run-many golden executor; the cache is keyed by the op's signature."""

    def __init__(self, cache_size: int = 4096, cache_dir: Path | None = None):
        import jax
        import jax.extend
        import jaxlib

        self._jax = jax
        self._backend = jax.extend.backend.get_backend("cpu")
        self._device = self._backend.local_devices()[0]
        self._options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1)
        self._optimised = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1)
        self._optimised.executable_build_options.debug_options.xla_backend_optimization_level = 2
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._cache_size = cache_size
        self._cache_dir = cache_dir
        self._salt = f"{jaxlib.__version__}|{os.environ.get('XLA_FLAGS', '')}"
        self.compiles = 0

    def executable(self, module_text: str, key: str | None = None, optimised: bool = False) -> object:
        """The compiled module, from memory, from the disk cache, or compiled now (`optimised`: with
        XLA's LLVM optimisation, whatever the process's flags say)."""
        key = (key or hashlib.sha256(module_text.encode()).hexdigest()) + ("|optimised" if optimised else "")
        exe = self._cache.get(key)
        if exe is not None:
            self._cache.move_to_end(key)
            return exe
        exe = self._load(key)
        if exe is None:
            options = self._optimised if optimised else self._options
            exe = self._backend.compile_and_load(module_text, [self._device], options)
            self.compiles += 1
            self._save(key, exe)
        self._cache[key] = exe
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return exe

    def execute(self, exe: object, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        buffers = [self._jax.device_put(np.asarray(x), self._device) for x in inputs]
        results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()  # type: ignore[attr-defined]
        return [np.asarray(r[0]) for r in results]

    def run(self, module_text: str, inputs: Sequence[np.ndarray], key: str | None = None) -> list[np.ndarray]:
        """Execute the module's @main on `inputs`; returns its results as numpy arrays."""
        large = sum(np.asarray(x).nbytes for x in inputs) > OPTIMISE_ABOVE_BYTES
        return self.execute(self.executable(module_text, key, optimised=large), inputs)

    # -- the disk cache --------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        if self._cache_dir is None:
            return None
        digest = hashlib.sha256(f"{self._salt}|{key}".encode()).hexdigest()
        return self._cache_dir / digest[:2] / f"{digest}.xla"

    def _load(self, key: str) -> object | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            return self._backend.deserialize_executable(path.read_bytes(), [self._device], self._options)
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
