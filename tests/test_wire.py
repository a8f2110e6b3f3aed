"""What an op carries to a Dask worker on another host and what its result brings back (opbyop.worker.wire)."""

from __future__ import annotations

import hashlib
import io
import sys
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from distributed import Client, LocalCluster

from opbyop.artifacts import ArtifactStore
from opbyop.records import CompileOutcome, FailedPass, OpResult, PassOutcome, Stage, Status
from opbyop.worker.dask import OpWorkerPlugin
from opbyop.worker.wire import home_id, named_digests, pack, shares_home, unpack
from opbyop.workspace import Workspace
from opbyop_tasks.gate import ClusterGate
from opbyop_tasks.ops import analyze_op

_COLLECTORS: list[list[Path]] = []  # the lists opened_files() is filling


def _collect_opens(event: str, args: tuple) -> None:
    if event == "open" and _COLLECTORS and isinstance(args[0], (str, Path)):
        _COLLECTORS[-1].append(Path(args[0]))


sys.addaudithook(_collect_opens)  # an audit hook cannot be removed: it collects only inside opened_files()


@contextmanager
def opened_files() -> Iterator[list[Path]]:
    """Every file this process (any thread) opens meanwhile, by Python's audit events."""
    opened: list[Path] = []
    _COLLECTORS.append(opened)
    try:
        yield opened
    finally:
        _COLLECTORS.remove(opened)


def test_a_home_keeps_one_identity_even_when_many_processes_create_it_at_once(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: home_id(tmp_path / "home"), range(32)))
    assert len(ids) == 1 and home_id(tmp_path / "home") in ids
    assert home_id(tmp_path / "other") not in ids  # another home, even a copy at another path, is another id
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["home-id"]  # no partial files left


def test_a_home_is_shared_only_where_this_host_has_the_same_identity(tmp_path):
    identity = home_id(tmp_path / "flow")
    assert shares_home(tmp_path / "flow", identity)
    assert not shares_home(tmp_path / "missing", identity)  # the flow's path is not on this host
    home_id(tmp_path / "same-path-elsewhere")
    assert not shares_home(tmp_path / "same-path-elsewhere", identity)


def test_a_results_artifacts_travel_to_the_flows_store_and_only_those_the_worker_holds(tmp_path):
    worker, flow = ArtifactStore(tmp_path / "worker"), ArtifactStore(tmp_path / "flow")
    ttir, flatbuffer, ir_before = worker.put(b"ttir", ".mlir"), worker.put(b"fb", ".ttnn"), worker.put(b"ir", ".mlir")
    signature = hashlib.sha256(b"the op").hexdigest()  # a digest that names no artifact
    result = OpResult(signature=signature, op_name="stablehlo.add", status=Status.COMPILE_FAILED,
                      depth=Stage.TTIR, failed_stage=Stage.TTNN,
                      compile=CompileOutcome(artifacts={"ttir": ttir, "flatbuffer": flatbuffer}),
                      failed_pass=FailedPass(outcome=PassOutcome.FAILED, ir_before=ir_before))
    assert named_digests(result) == {signature, ttir, flatbuffer, ir_before}
    parcel = pack(worker, named_digests(result))
    assert set(parcel) == {ttir, flatbuffer, ir_before}
    unpack(flow, parcel)
    assert flow.read(ttir) == b"ttir" and flow.path(flatbuffer).suffix == ".ttnn" and flow.read(ir_before) == b"ir"


def test_a_dask_worker_without_the_flows_home_works_in_its_own(tmp_path, monkeypatch):
    flow = tmp_path / "flow"
    plugin = OpWorkerPlugin.for_home(flow, {"p150": b"descriptor"})
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "own"))
    here = OpWorkerPlugin(**plugin.__getstate__())  # as a Dask worker receives it
    assert here.home == flow and here.shared  # this host has the flow's home
    elsewhere = OpWorkerPlugin(**{**plugin.__getstate__(), "workspace": str(tmp_path / "not-here")})
    assert elsewhere.home == tmp_path / "own" and not elsewhere.shared
    assert plugin.name == OpWorkerPlugin.for_home(flow, {"p150": b"descriptor"}).name  # a warm cluster keeps it


def test_a_home_at_the_flows_path_on_another_host_is_not_taken_for_the_flows(tmp_path, monkeypatch):
    same_path = tmp_path / "srv" / "opbyop"
    plugin = OpWorkerPlugin.for_home(same_path, {"p150": b"descriptor"})  # the flow's home there ...
    (same_path / "home-id").unlink()
    home_id(same_path)  # ... and another host's own home at the same path
    monkeypatch.setenv("OPBYOP_HOME", str(same_path))
    there = OpWorkerPlugin(**plugin.__getstate__())
    assert there.home == same_path and not there.shared  # its artifacts still travel back


def test_a_mesh_target_s_op_workers_get_its_host_devices_whatever_the_flow_s_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_HOST_DEVICES", "32")  # left by an earlier, larger target of a long-lived process
    descriptors = {"p300": b"desc"}
    p300, p150 = (OpWorkerPlugin.for_home(tmp_path, descriptors, host_devices=n) for n in (2, 1))
    assert (p300.host_devices, p150.host_devices) == (2, 1) and "OPBYOP_HOST_DEVICES" not in p300.env
    assert p300.name != p150.name  # op workers of another device count are other op workers
    assert OpWorkerPlugin.for_home(tmp_path, descriptors, host_devices=2).name == p300.name  # a warm one is found


@pytest.mark.slow
def test_an_op_s_inputs_are_read_on_the_flow_s_host_only_for_a_worker_without_its_home(
        p150, mlp_ops, settings, tmp_path, monkeypatch):
    flow = Workspace(tmp_path / "flow")
    op = next(o for o in mlp_ops if o.op_name == "stablehlo.add" and o.inputs[1].dtype == "f32")
    buffer = io.BytesIO()
    np.save(buffer, np.full(op.inputs[1].shape, 0.5, np.float32), allow_pickle=False)
    digest = flow.artifacts.put(buffer.getvalue(), ".npy")
    op = op.model_copy(update={"input_values": {1: digest}})
    here = OpWorkerPlugin.for_home(flow.root, {"p150": p150.path.read_bytes()})
    elsewhere = OpWorkerPlugin(**{**here.__getstate__(), "workspace": str(tmp_path / "not-here")})
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "own"))  # the Dask worker's own home
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for plugin in (here, elsewhere):
            client.register_plugin(plugin)
        opened = {}
        for plugin in (here, elsewhere):
            with opened_files() as opened[plugin.name]:
                result = analyze_op.fn(op, "add", "p150", settings, 120, plugin.name,
                                       ClusterGate(client, plugin.name), flow.artifacts)
            assert result.status is Status.SUCCESS and result.real_inputs == ["arg1"], result
    value = flow.artifacts.path(digest)
    assert value not in opened[here.name]  # the worker reads it in the shared home: the flow does not
    assert opened[elsewhere.name].count(value) == 1  # sent once, when that worker asked for it
    assert ArtifactStore(tmp_path / "own" / "artifacts").read(digest) == buffer.getvalue()
