"""Choose JAX's platforms before JAX initialises any backend.

jax-tt-plugin registers the `tt` platform in every process that imports jax. Without a device and
without a compile-only system descriptor, initialising it fails for EVERY backend, CPU included
(facts/tt-compiler.md). So each process decides once, before its first JAX computation: CPU only
(golden, frontends, tests) or TT compile-only with a descriptor (compile workers).
"""

from __future__ import annotations

import os
from pathlib import Path

from opbyop.errors import OpbyopError

_DESC_VAR = "TT_COMPILE_ONLY_SYSTEM_DESC"


def _backends_initialised() -> bool:
    import sys

    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(bridge is not None and getattr(bridge, "_backends", None))


def prepare_jax(system_desc: Path | None = None) -> None:
    """Make this process's JAX see the CPU, plus the TT compiler when a descriptor is given.

    Idempotent; refuses to switch platforms once JAX has initialised its backends, since JAX would
    silently keep the old ones.
    """
    if system_desc is not None:
        wanted = {"JAX_PLATFORMS": "tt,cpu", _DESC_VAR: str(Path(system_desc).resolve())}
    else:
        wanted = {"JAX_PLATFORMS": "cpu"}
    current = {k: os.environ.get(k) for k in wanted}
    if _backends_initialised() and current != wanted:
        raise OpbyopError(
            f"JAX already initialised its backends with {current}, cannot switch to {wanted}",
            "compile in a worker process (opbyop.worker) instead of the process that already used JAX",
        )
    os.environ.update(wanted)
    if system_desc is None:
        os.environ.pop(_DESC_VAR, None)
    import jax

    # f64/i64 operands must reach XLA unchanged (facts/stack.md, golden section).
    jax.config.update("jax_enable_x64", True)
