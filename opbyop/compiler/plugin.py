"""Compile StableHLO through tt-mlir inside the TT PJRT plugin (compile-only mode).

Only a process whose JAX was prepared with a system descriptor can use this (opbyop.jaxenv);
opbyop.worker runs it in long-lived worker processes, since the compiler can abort its process.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from opbyop.artifacts import ArtifactStore
from opbyop.compiler.stages import failed_after, read_dumps
from opbyop.config import CompilerOptions
from opbyop.ir.mesh import MeshMismatchError, module_mesh
from opbyop.records import CompileOutcome, Stage


class TTCompiler:
    """The plugin's compiler for the chip this process's descriptor describes."""

    def __init__(self) -> None:
        import jax.extend

        self._backend = jax.extend.backend.get_backend("tt")
        self._devices = self._backend.local_devices()  # one per chip of the descriptor
        self._device = self._devices[0]

    @property
    def chips(self) -> int:
        return len(self._devices)

    def compile(self, module_text: str, options: CompilerOptions, export_dir: Path,
                artifacts: ArtifactStore | None = None) -> CompileOutcome:
        """Compile once into a fresh `export_dir`; record stages, message verbatim and artifacts.
        A sharded module is compiled for its mesh: num_partitions and as many of the target's chips
        as the mesh has devices (MeshMismatchError when the target has fewer)."""
        import jax.extend

        mesh = module_mesh(module_text)
        partitions = mesh.devices if mesh is not None else 1
        if partitions > len(self._devices):
            raise MeshMismatchError(f"the module is sharded over {partitions} devices ({mesh}), but the target "
                                    f"has {len(self._devices)} chip(s)", "pick a target with enough chips (--chip)")
        if export_dir.exists():
            shutil.rmtree(export_dir)  # never read another compile's dumps
        export_dir.mkdir(parents=True)
        compile_options = jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=partitions)
        compile_options.env_option_overrides = [("export_path", str(export_dir)), *options.plugin_options()]
        message = None
        started_wall, started = time.time(), time.perf_counter()
        try:
            self._backend.compile_and_load(module_text, self._devices[:partitions], compile_options)
        except Exception as e:  # the compiler's own words, kept whole
            message = str(e)
        seconds = time.perf_counter() - started
        dumps = read_dumps(export_dir, started_wall)
        stored = {}
        if artifacts is not None:
            stored = {kind: artifacts.put_file(path) for kind, path in dumps.files.items()}
        failed = failed_after(dumps.reached) if message is not None or dumps.reached is not Stage.FLATBUFFER else None
        if failed is not None and message is None:
            message = f"the compiler returned without error but wrote no {failed.value} output"
        return CompileOutcome(reached=dumps.reached, failed_stage=failed, message=message,
                              stage_seconds=dumps.seconds, seconds=seconds, artifacts=stored)
