"""Compile StableHLO through tt-mlir inside a build of the TT PJRT plugin (compile-only mode).

The compiler runs where its build loads (opbyop.compiler.builds): in this process, which JAX was
prepared for with the build and a system descriptor (opbyop.jaxenv), or, for a build made for another
jaxlib, in a compile server of its own environment that this process starts and feeds (the rest of
the op's analysis, golden included, stays here, on opbyop's own XLA:CPU). opbyop.worker runs either
in long-lived worker processes, since the compiler can abort its process: a compile server that dies
takes its worker with it, by the same signal, so a crash reads the same both ways.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Protocol

from opbyop.artifacts import ArtifactStore
from opbyop.compiler import pjrt
from opbyop.compiler.builds import Compiler
from opbyop.compiler.stages import failed_after, read_dumps
from opbyop.config import CompilerOptions
from opbyop.ir.mesh import MeshMismatchError, module_mesh
from opbyop.records import CompileOutcome, Stage


class Session(Protocol):
    """Where a build compiles: `devices` it lists (one per chip of its descriptor), and one compile."""

    devices: int

    def compile(self, module_text: str, partitions: int, options: list[tuple[str, str]], export_dir: Path) -> dict:
        """{"message": the compiler's words or None, "seconds": wall time, "started_wall": time.time() at start}"""


class InProcess:
    """The build loaded in this process (JAX prepared with it: opbyop.jaxenv.prepare_jax)."""

    def __init__(self) -> None:
        import jax.extend  # deferred: a process imports jax only once its platforms are chosen

        self._backend = jax.extend.backend.get_backend(pjrt.PLATFORM)
        self.devices = len(self._backend.local_devices())

    def compile(self, module_text: str, partitions: int, options: list[tuple[str, str]], export_dir: Path) -> dict:
        return pjrt.compile_module(self._backend, module_text, partitions, options, str(export_dir))


class CompileServer:
    """The build in a process of its own environment (opbyop.compiler.pjrt's `serve`), compiling what
    this process sends. Its output goes where this process's goes (the worker's log)."""

    def __init__(self, compiler: Compiler, system_desc: Path):
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        env = compiler.process_environment(Path(os.environ.get("TMPDIR", "/tmp")),
                                           TT_COMPILE_ONLY_SYSTEM_DESC=str(Path(system_desc).resolve()))
        self._proc = subprocess.Popen(compiler.command("serve", str(requests_r), str(replies_w)),
                                      pass_fds=(requests_r, replies_w), stdin=subprocess.DEVNULL, env=env)
        os.close(requests_r)
        os.close(replies_w)
        self._requests = os.fdopen(requests_w, "wb")
        self._replies = os.fdopen(replies_r, "rb")
        self.devices = int(self._answer()["devices"])

    def compile(self, module_text: str, partitions: int, options: list[tuple[str, str]], export_dir: Path) -> dict:
        request = {"module": module_text, "partitions": partitions, "options": [list(o) for o in options],
                   "export_dir": str(export_dir)}
        try:
            self._requests.write((json.dumps(request) + "\n").encode())
            self._requests.flush()
        except OSError:
            self._die_with_server()
        return self._answer()

    def _answer(self) -> dict:
        line = self._replies.readline()
        if not line:
            self._die_with_server()
        return json.loads(line)

    def _die_with_server(self) -> None:
        """The server died (the compiler aborted): this process dies the same way, so its worker
        records the crash as it records an in-process one."""
        code = self._proc.wait()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code or 1)


def session_for(compiler: Compiler | None, system_desc: Path | None = None) -> Session:
    """Where `compiler` compiles from this process: here when it loads here, else its server."""
    if compiler is None or compiler.in_process:
        return InProcess()
    if system_desc is None:
        raise ValueError("a compile server needs the system descriptor it compiles for")
    return CompileServer(compiler, system_desc)


class TTCompiler:
    """The compiler for the chip this process's descriptor describes, in its `session`."""

    def __init__(self, session: Session | None = None) -> None:
        self._session = session or InProcess()

    @property
    def chips(self) -> int:
        return self._session.devices

    def compile(self, module_text: str, options: CompilerOptions, export_dir: Path,
                artifacts: ArtifactStore | None = None) -> CompileOutcome:
        """Compile once into a fresh `export_dir`; record stages, message verbatim and artifacts.
        A sharded module is compiled for its mesh: num_partitions and as many of the target's chips
        as the mesh has devices (MeshMismatchError when the target has fewer)."""
        mesh = module_mesh(module_text)
        partitions = mesh.devices if mesh is not None else 1
        if partitions > self.chips:
            raise MeshMismatchError(f"the module is sharded over {partitions} devices ({mesh}), but the target "
                                    f"has {self.chips} chip(s)", "pick a target with enough chips (--chip)")
        if export_dir.exists():
            shutil.rmtree(export_dir)  # never read another compile's dumps
        export_dir.mkdir(parents=True)
        done = self._session.compile(module_text, partitions, options.plugin_options(), export_dir)
        message = done["message"]
        dumps = read_dumps(export_dir, done["started_wall"])
        stored = {}
        if artifacts is not None:
            stored = {kind: artifacts.put_file(path) for kind, path in dumps.files.items()}
        failed = failed_after(dumps.reached) if message is not None or dumps.reached is not Stage.FLATBUFFER else None
        if failed is not None and message is None:
            message = f"the compiler returned without error but wrote no {failed.value} output"
        return CompileOutcome(reached=dumps.reached, failed_stage=failed, message=message,
                              stage_seconds=dumps.seconds, seconds=done["seconds"], artifacts=stored)
