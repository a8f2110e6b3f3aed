"""Warm op workers on Dask: each Dask worker owns one OpWorker (a child process) per chip.

A Dask WorkerPlugin holds them, so compiler, XLA:CPU and device stay warm across ops, and a
compiler abort costs one child process, not the Dask worker. A Dask worker on another host works in
its own OPBYOP_HOME: the plugin brings the system descriptors (cached there by content hash), each op
brings the artifacts it reads and takes back the ones its result names (opbyop.worker.wire).
Functions here are plain Python: no Prefect runs on Dask workers (they could not reach an ephemeral
Prefect API anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from pathlib import Path

from distributed import WorkerPlugin, get_worker

from opbyop import atomic
from opbyop.artifacts import ArtifactStore
from opbyop.compiler.builds import Compiler, portable_spec, prepare
from opbyop.environment import environment
from opbyop.errors import CompilerError
from opbyop.worker import faults
from opbyop.records import OpResult, UniqueOp, WholeModelResult
from opbyop.worker.process import OpWorker
from opbyop.worker.wire import Parcel, Shipped, home_id, named_digests, pack, shares_home, unpack
from opbyop.config import AnalysisSettings

PLUGIN_PREFIX = "opbyop-op-workers"
EXPORT_RESOURCE = "export"  # a Dask worker started with `--resources export=1` takes exports (opbyop.run.worker_exports)


class OpWorkerPlugin(WorkerPlugin):
    """Starts OpWorkers lazily on each Dask worker; closes them with the worker.

    Named after its configuration and idempotent: registering the same configuration again (a
    cluster that outlives a run, warmed up before the run started) keeps the warm OpWorkers."""

    idempotent = True

    def __init__(self, workspace: str, descriptors: dict[str, bytes], env: dict[str, str] | None = None,
                 home_id: str = "", host_devices: int | None = None, compiler: Compiler | None = None):
        self.workspace = workspace  # the flow's home: used only where it is this host's too (home_id)
        self.descriptors = descriptors  # chip -> .ttsys bytes: remote workers need no local copy
        self.env = env or {}
        self.home_id = home_id  # the flow's home's identity (wire.home_id); "" = the home is shared
        self.host_devices = host_devices  # each op worker's XLA:CPU devices (None: the Dask worker's environment)
        self.compiler = compiler  # the build under test (None: the plugin installed beside each Dask worker)
        key = compiler.key if compiler is not None else ""
        digest = hashlib.sha256(json.dumps([workspace, sorted(self.env.items()), home_id, host_devices, key]).encode())
        for chip, data in sorted(descriptors.items()):
            digest.update(chip.encode() + hashlib.sha256(data).digest())
        self.name = f"{PLUGIN_PREFIX}-{digest.hexdigest()[:12]}"
        self._workers: dict[str, OpWorker] = {}
        self._name = "worker"
        self._home: Path | None = None
        self._shared = False
        self._lock = threading.Lock()  # a Dask worker with several threads creates each OpWorker once

    @classmethod
    def for_home(cls, root: Path, descriptors: dict[str, bytes], host_devices: int = 1,
                 compiler: Compiler | None = None) -> OpWorkerPlugin:
        """The plugin of a flow whose home is `root`: a Dask worker without that home works in its own.
        The flow's XLA:CPU flags go with it: golden references must not depend on the host. A mesh
        target's op workers get a host mesh of `host_devices` XLA:CPU devices for their golden runs
        (fixed when a process starts JAX, so set here per target, never inherited from whichever
        target started the cluster)."""
        env = {"OPBYOP_XLA_FLAGS": environment().xla_flags}
        return cls(str(root), descriptors, env=env, home_id=home_id(root), host_devices=host_devices, compiler=compiler)

    def __getstate__(self) -> dict:
        # sent to every Dask worker: the configuration only, never locks or live child processes
        return {"workspace": self.workspace, "descriptors": self.descriptors, "env": self.env,
                "home_id": self.home_id, "host_devices": self.host_devices, "compiler": self.compiler}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def setup(self, worker: object) -> None:
        self._name = f"dask-{getattr(worker, 'name', os.getpid())}"

    def teardown(self, worker: object) -> None:
        for w in self._workers.values():
            w.close()
            w.close_passes()
        self._workers.clear()

    def _place(self) -> tuple[Path, bool]:
        """(this Dask worker's home, whether it is the flow's), decided once, on the worker."""
        if self._home is None:
            self._shared = not self.home_id or shares_home(Path(self.workspace), self.home_id)
            self._home = Path(self.workspace) if self._shared else environment().home.resolve()
        return self._home, self._shared

    @property
    def home(self) -> Path:
        """Where this Dask worker keeps its files: the flow's home when this host has it, else its
        own OPBYOP_HOME."""
        return self._place()[0]

    @property
    def shared(self) -> bool:
        """Whether the flow reads this worker's artifacts where it wrote them (a home at the same
        path on another host is another home)."""
        return self._place()[1]

    @property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.home / "artifacts")

    def abort(self, tag: str) -> int:
        return sum(w.abort(tag) for w in list(self._workers.values()))

    def op_worker(self, chip: str) -> OpWorker:
        with self._lock:
            return self._op_worker(chip)

    def _op_worker(self, chip: str) -> OpWorker:
        if chip not in self._workers:
            data = self.descriptors[chip]
            path = self.home / "system_descs" / f"{hashlib.sha256(data).hexdigest()[:16]}.ttsys"
            if not path.exists():
                atomic.write_bytes(path, data)
            compiler = self._local_compiler()
            # its own name: its scratch, $TMPDIR and log are never another build's (each build's worker
            # of this Dask worker lives beside the others)
            build = f"-{compiler.key[:8]}" if compiler is not None else ""
            worker = OpWorker(path, self.home, chip=chip, name=f"{self._name}-{chip}{build}-{os.getpid()}",
                              env=self.env, host_devices=self.host_devices, compiler=compiler)
            self._workers[chip] = faults.injected(worker, environment().dask_fault_inject, "analyze")
        return self._workers[chip]


    def _local_compiler(self) -> Compiler | None:
        """The build on this Dask worker's host: the flow's where its library is here, else the same
        build prepared here (a release is fetched from the registry); another build is refused."""
        wanted = self.compiler
        if wanted is None or wanted.library.is_file():
            return wanted
        here = prepare(portable_spec(wanted.identity))
        if here.key != wanted.key:
            raise CompilerError(f"this Dask worker's host has another build for {wanted.identity.spec} "
                                f"({here.label}, not {wanted.label})",
                                "give every host the same build (a release, or the same library at the same path)")
        return here


def _plugin(name: str, worker: object | None = None) -> OpWorkerPlugin:
    plugin = (worker or get_worker()).plugins.get(name)  # type: ignore[attr-defined]
    if plugin is None:
        raise RuntimeError(f"the opbyop worker plugin {name} is not registered on this Dask worker")
    return plugin  # type: ignore[return-value]


def analyze_op(plugin: str, op: UniqueOp, chip: str, settings: AnalysisSettings, timeout: float,
               tag: str = "") -> OpResult:
    """Runs on a Dask worker: one op through its warm OpWorker. `tag`: the run's (abort_in_flight)."""
    return _plugin(plugin).op_worker(chip).analyze(op, settings, timeout, tag)


class ValuesWanted(RuntimeError):
    """Work was sent without the flow's files it reads (an op's input values, a whole model's npz) to
    a worker that does not share the flow's home: send it again with their bytes."""


def analyze_op_shipped(plugin: str, op: UniqueOp, chip: str, settings: AnalysisSettings, timeout: float,
                       tag: str = "", inputs: Parcel | None = None) -> Shipped[OpResult]:
    """Runs on a Dask worker: analyze_op for a worker that may not share the flow's home. `inputs`:
    the artifacts the op reads (its arguments' real values), needed only there (ValuesWanted when
    they were not sent)."""
    found = _plugin(plugin)
    if not found.shared:
        if inputs is None and op.input_values:
            raise ValuesWanted(f"the input values of op {op.signature[:16]} are on the flow's host")
        unpack(found.artifacts, inputs or {})
    result = found.op_worker(chip).analyze(op, settings, timeout, tag)
    return Shipped(result, {} if found.shared else pack(found.artifacts, named_digests(result)))


def analyze_whole_shipped(plugin: str, model: str, module_text: str, values_path: str, parameters: list[int],
                          chip: str, settings: AnalysisSettings, timeout: float, iterations: int = 2, tag: str = "",
                          values: bytes | None = None) -> Shipped[WholeModelResult]:
    """Runs on a Dask worker: analyze_whole for a worker that may not share the flow's home; `values`
    are the npz's bytes, needed only there (ValuesWanted when they were not sent)."""
    found = _plugin(plugin)
    if found.shared:
        result = found.op_worker(chip).analyze_whole_from(model, module_text, values_path, parameters, settings,
                                                          timeout, iterations, tag)
        return Shipped(result)
    if values is None:
        raise ValuesWanted(f"the whole model {model}'s values are on the flow's host")
    local = atomic.write_bytes(found.home / "scratch" / f"values-{uuid.uuid4().hex[:12]}.npz", values)
    try:
        result = found.op_worker(chip).analyze_whole_from(model, module_text, str(local), parameters, settings,
                                                          timeout, iterations, tag)
    finally:
        local.unlink(missing_ok=True)
    return Shipped(result, pack(found.artifacts, named_digests(result)))


def abort_in_flight(plugin: str, tag: str, dask_worker: object | None = None) -> int:
    """Runs on every Dask worker (Client.run): kill the op workers busy with a request tagged `tag`.
    A stopped run's op would otherwise hold its Dask worker up to the op's timeout, which a cluster
    that outlives the run (opbyop serve, a deployment's) cannot afford. How many were killed."""
    found = (dask_worker or get_worker()).plugins.get(plugin)  # type: ignore[attr-defined]
    return found.abort(tag) if isinstance(found, OpWorkerPlugin) else 0


def rest(plugin: str, dask_worker: object | None = None) -> int:
    """Runs on every Dask worker (Client.run) when a run's fan-out ends: stop its op workers' side
    children (the verbose and pass-timing compiles, 0.3-0.4 GB each, started by failed compiles);
    the main children stay warm for the next run of the same build. How many op workers rested."""
    found = (dask_worker or get_worker()).plugins.get(plugin)  # type: ignore[attr-defined]
    if not isinstance(found, OpWorkerPlugin):
        return 0
    for worker in list(found._workers.values()):
        worker.close_passes()
    return len(found._workers)


def warm_up(plugin: str, chip: str, dask_worker: object | None = None) -> int:
    """Start this Dask worker's OpWorker now (so the first op does not pay for it); returns its pid.
    Raises WorkerStartError when it cannot start (a descriptor no compiler accepts, a broken plugin).

    Meant for Client.run, which passes the Dask worker as `dask_worker`."""
    worker = _plugin(plugin, dask_worker).op_worker(chip)
    worker.start()
    return worker.pid or 0
