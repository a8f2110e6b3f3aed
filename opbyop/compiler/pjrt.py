"""A build of the TT PJRT plugin, loaded by path, and what a process with only jax does with it.

A build of the compiler is one shared library (jax-tt-plugin's `libtt.so`, tt-xla's
`pjrt_plugin_tt.so`: tt-xla, tt-mlir and tt-metal inside). A release's Python package does nothing
but register that library with JAX as the platform `tt` (jax-tt-plugin 0.1.0 to 0.1.3 ship the same
`__init__.py`), so opbyop loads any build the same way: JAX's plugin discovery is marked done, so
the plugin installed beside opbyop never loads, and the build's library is registered by path.

This file imports only the standard library at its top and nothing of opbyop: a build made for
another jaxlib runs it by path in an environment of its own (opbyop.compiler.builds), as
`python pjrt.py LIBRARY VERB [ARG]`:
- `unpack`: start the plugin once (its first start unpacks tt-metal's runtime assets into $TMPDIR);
- `describe OUT`: start it in tt-metal's mock mode (TT_METAL_MOCK_CLUSTER_DESC_PATH) and copy the
  system descriptor it wrote (it deletes the file when its process exits);
- `check EXPORT_DIR`: compile a one-op module for TT_COMPILE_ONLY_SYSTEM_DESC;
- `serve IN_FD OUT_FD`: compile the requests that arrive as JSON lines, one at a time, until EOF.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

PLATFORM = "tt"

TRIAL_MODULE = """module {
  func.func @main(%a: tensor<32x32xf32>, %b: tensor<32x32xf32>) -> tensor<32x32xf32> {
    %0 = stablehlo.add %a, %b : tensor<32x32xf32>
    return %0 : tensor<32x32xf32>
  }
}
"""


def register(library: str) -> None:
    """Make `library` this process's `tt` platform, before JAX initialises its backends."""
    import jax._src.xla_bridge as bridge
    from jax._src.interpreters import mlir

    if hasattr(bridge, "_plugins_registered"):
        bridge._plugins_registered = True  # no discovery: the installed plugin must not load beside this one
    platforms = getattr(mlir, "_platforms_with_donation", None)
    if platforms is not None and PLATFORM not in platforms:
        platforms.append(PLATFORM)  # as the plugin's own package does: input donation on `tt`
    bridge.register_plugin(PLATFORM, priority=500, library_path=library, options=None)


def _backend():  # noqa: ANN202  (jax is imported by the caller's register())
    import jax.extend

    return jax.extend.backend.get_backend(PLATFORM)


def compile_module(backend, module_text: str, partitions: int, options: list, export_dir: str) -> dict:  # noqa: ANN001
    """Compile once into `export_dir` (the plugin writes each stage it reached there); the
    compiler's message when it refused, and the wall time."""
    import jax.extend

    devices = backend.local_devices()
    compile_options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=partitions)
    compile_options.env_option_overrides = [("export_path", export_dir), *[tuple(o) for o in options]]
    message = None
    started_wall, started = time.time(), time.perf_counter()
    try:
        backend.compile_and_load(module_text, devices[:partitions], compile_options)
    except Exception as e:  # the compiler's own words, kept whole
        message = str(e)
    return {"message": message, "seconds": time.perf_counter() - started, "started_wall": started_wall}


def _write_line(fd: int, value: dict) -> None:
    data = (json.dumps(value) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _die_with_parent() -> None:
    """Ask Linux to end this process when its parent does: a compile server never outlives its worker."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


def serve(in_fd: int, out_fd: int) -> None:
    """Answer compile requests ({"module", "partitions", "options", "export_dir"}) as JSON lines; the
    first line out says how many devices the plugin lists and which jax drives it."""
    import jax

    _die_with_parent()

    backend = _backend()
    _write_line(out_fd, {"devices": len(backend.local_devices()), "jax": jax.__version__})
    with os.fdopen(in_fd, "rb") as requests:
        for line in requests:
            request = json.loads(line)
            _write_line(out_fd, compile_module(backend, request["module"], request["partitions"],
                                               request["options"], request["export_dir"]))


def main(argv: list[str]) -> None:
    library, verb, *rest = argv
    register(library)
    if verb == "unpack":  # loading unpacks the assets, even where no chip can be opened
        try:
            _backend()
        except Exception:
            pass
        return
    backend = _backend()
    if verb == "describe":  # the plugin deletes its descriptor when this process exits: copy it now
        shutil.copy(os.path.join(os.environ["TMPDIR"], "tt_pjrt_system_descriptor"), rest[0])
    elif verb == "check":
        outcome = compile_module(backend, TRIAL_MODULE, 1, [], rest[0])
        if outcome["message"] is not None:
            sys.exit(f"the compiler refused a one-op module: {outcome['message']}")
    elif verb == "serve":
        serve(int(rest[0]), int(rest[1]))
    else:
        sys.exit(f"unknown verb {verb!r}: use unpack, describe OUT, check EXPORT_DIR or serve IN_FD OUT_FD")


if __name__ == "__main__":
    main(sys.argv[1:])
