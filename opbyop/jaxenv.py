"""Choose JAX's platforms before JAX initialises any backend.

jax-tt-plugin registers the `tt` platform in every process that imports jax. Without a device and
without a compile-only system descriptor, initialising it fails for EVERY backend, CPU included
('Unable to initialize backend tt: No chips detected'). So each process decides once, before its first JAX computation: CPU only
(golden, frontends, tests) or TT compile-only with a descriptor (compile workers).
"""

from __future__ import annotations

import os
from pathlib import Path

from opbyop.compiler import pjrt
from opbyop.compiler.assets import startup_lock
from opbyop.environment import environment
from opbyop.errors import OpbyopError

_DESC_VAR = "TT_COMPILE_ONLY_SYSTEM_DESC"


def _backends_initialised() -> bool:
    import sys

    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(bridge is not None and getattr(bridge, "_backends", None))


def prepare_jax(system_desc: Path | None = None, host_devices: int | None = None, plugin: Path | None = None) -> None:
    """Make this process's JAX see the CPU, plus the TT compiler when a descriptor is given.

    `host_devices`: the XLA:CPU devices of this process (a sharded op's golden runs on a host mesh
    as large as its target's); fixed when JAX starts, so given here. None: OPBYOP_HOST_DEVICES (1).
    `plugin`: the PJRT library of the compiler build to load (opbyop.compiler.builds), registered by
    path in place of the plugin JAX would discover; None: the one JAX discovers.

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
    if not _backends_initialised():
        _add_xla_flags(environment().host_devices if host_devices is None else host_devices)
    import jax

    # f64/i64 operands must reach XLA unchanged (else they are downcast and XLA refuses the inputs).
    jax.config.update("jax_enable_x64", True)
    _quiet_xla_info_logs()
    if system_desc is not None and plugin is not None and not _backends_initialised():
        pjrt.register(str(plugin))
    if system_desc is None and not _backends_initialised():
        if _skip_plugin_discovery():
            return  # no plugin is loaded, so none unpacks assets: no lock to take
        import jax.extend

        # Every JAX process loads libtt while discovering plugins, and its loading unpacks the
        # plugin's assets: two processes at once fail ('failed to extract embedded tt-metal
        # runtime archive'), so this one waits its turn like the compiler workers do.
        with startup_lock():
            jax.extend.backend.get_backend("cpu")


def _quiet_xla_info_logs() -> None:
    """XLA's C++ INFO lines off ('PjRt-IFRT device count: ...' on the terminal at each run's first
    computation), as `import jax` means them to be: it sets TF_CPP_MIN_LOG_LEVEL=1, read once when
    jaxlib loads, which is too late when the MLIR bindings loaded jaxlib first. A user's own level stays."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "1":
        from jax._src.lib import utils  # jax's own switch (jax._src.logging_config); jax is imported by now

        utils.absl_set_min_log_level(1)


def _skip_plugin_discovery() -> bool:
    """In a CPU-only process, mark JAX's PJRT plugin discovery as done before it runs; False when
    this JAX has no such flag (then discovery runs as usual).

    Discovery loads every installed plugin whatever JAX_PLATFORMS says, and loading libtt takes 2-4 s
    (benchmarks/bench_jax_start.py) and unpacks the compiler's runtime, for a platform a CPU-only
    process never uses: the CLI, the flow, golden. JAX has no public switch; it runs discovery once
    per process, behind this module flag."""
    import jax._src.xla_bridge as bridge

    if not hasattr(bridge, "_plugins_registered"):
        return False
    bridge._plugins_registered = True
    return True


def _add_xla_flags(devices: int) -> None:
    """opbyop's XLA flags (golden.xla_cpu.FAST_FLAGS) beside the user's own XLA_FLAGS, with `devices`
    XLA:CPU devices."""
    extra = environment().xla_flags
    if devices > 1:  # a host mesh: a sharded module's golden runs on as many XLA:CPU devices as its mesh
        extra = f"{extra} --xla_force_host_platform_device_count={devices}".strip()
    current = os.environ.get("XLA_FLAGS", "")
    if extra and extra not in current:
        os.environ["XLA_FLAGS"] = f"{current} {extra}".strip()
