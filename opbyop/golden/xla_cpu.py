"""Run StableHLO modules on XLA:CPU through jax's public backend API, executables cached.

The process must have chosen its JAX platforms first (opbyop.jaxenv.prepare_jax).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Sequence

import numpy as np


class XlaCpu:
    """Compile-once, run-many golden executor; the cache is keyed by the op's signature."""

    def __init__(self, cache_size: int = 4096):
        import jax
        import jax.extend

        self._jax = jax
        self._backend = jax.extend.backend.get_backend("cpu")
        self._device = self._backend.local_devices()[0]
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._cache_size = cache_size
        self.compiles = 0

    def _executable(self, module_text: str, key: str | None) -> object:
        key = key or hashlib.sha256(module_text.encode()).hexdigest()
        exe = self._cache.get(key)
        if exe is None:
            import jax.extend

            options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1)
            exe = self._backend.compile_and_load(module_text, [self._device], options)
            self.compiles += 1
            self._cache[key] = exe
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return exe

    def run(self, module_text: str, inputs: Sequence[np.ndarray], key: str | None = None) -> list[np.ndarray]:
        """Execute the module's @main on `inputs`; returns its results as numpy arrays."""
        exe = self._executable(module_text, key)
        buffers = [self._jax.device_put(np.asarray(x), self._device) for x in inputs]
        results = exe.execute_sharded(buffers).disassemble_into_single_device_arrays()
        return [np.asarray(r[0]) for r in results]
