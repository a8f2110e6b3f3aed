"""The child process of a worker: compiler, XLA:CPU and device kept warm, one request at a time.

Started by opbyop.worker.process.OpWorker; talks JSON over two inherited pipe descriptors, so the
compiler's own chatter on stdout/stderr (sent to a log file) can never corrupt the protocol.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from opbyop.analysis.analyzer import OpAnalyzer, WholeModel
from opbyop.compiler.builds import Compiler
from opbyop.compiler.plugin import TTCompiler, session_for
from opbyop.device.simulator import DeviceSimulator
from opbyop.device.ttsim.backend import TtsimBackend
from opbyop.environment import environment
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.jaxenv import prepare_jax
from opbyop.stage_call import describe_exception
from opbyop.worker import faults
from opbyop.worker.protocol import MESSAGE, Failure, Progress, Ready, Reply, Request, WholeReply, WholeRequest
from opbyop.workspace import Workspace


def _limit_memory(extra: int) -> None:
    """Cap this process's address space at what it holds now (compiler, XLA:CPU loaded) plus `extra`:
    an allocation beyond it raises MemoryError in the op that made it (0: no cap)."""
    if extra <= 0:
        return
    import resource

    import psutil

    limit = psutil.Process().memory_info().vms + extra
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def serve(conn_in: Connection, conn_out: Connection, system_desc: Path, workspace: Path, chip: str,
          compiler: Compiler, host_devices: int | None = None) -> None:
    # a build that loads here is this process's `tt` platform; one made for another jaxlib compiles in
    # its own environment's server, and this process keeps to the CPU (golden, device)
    prepare_jax(system_desc if compiler.in_process else None, host_devices, plugin=compiler.library)

    scratch = workspace / "scratch" / f"child-{os.getpid()}"

    home, env = Workspace(workspace), environment()
    ttsim = TtsimBackend(home.root, scratch, env.ttsim, env.ttnn_python)  # set up on first use only
    compile_here = TTCompiler(session_for(compiler, system_desc))
    analyzer = faults.injected(OpAnalyzer(compile_here, XlaCpu(cache_dir=home.xla_cache), DeviceSimulator(),
                                          home.artifacts, scratch, ttsim), env.fault_inject, "analyze")
    _limit_memory(env.worker_memory_limit)
    conn_out.send_bytes(Ready(pid=os.getpid(), chip=chip, compiler=compiler.key).model_dump_json().encode())
    while True:
        try:
            raw = conn_in.recv_bytes()
        except EOFError:
            break
        request = MESSAGE.validate_json(raw)
        assert isinstance(request, (Request, WholeRequest))

        def progress(stage: str, request_id: str = request.id) -> None:
            conn_out.send_bytes(Progress(id=request_id, stage=stage).model_dump_json().encode())

        try:
            if isinstance(request, Request):
                reply: Reply | WholeReply | Failure = Reply(
                    id=request.id, result=analyzer.analyze(request.op, request.settings, request.id, progress))
            else:
                whole = WholeModel(name=request.model, module_text=request.module_text, values_path=request.values_path,
                                   parameters=request.parameters, iterations=request.iterations)
                reply = WholeReply(id=request.id, result=analyzer.analyze_whole(whole, request.settings, request.id,
                                                                                progress))
        except Exception as e:
            reply = Failure(id=request.id, error=describe_exception(e))
        shutil.rmtree(scratch / request.id, ignore_errors=True)
        conn_out.send_bytes(reply.model_dump_json().encode())
    if analyzer.ttsim is not None:
        analyzer.ttsim.close()
    shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--in-fd", type=int, required=True)
    parser.add_argument("--out-fd", type=int, required=True)
    parser.add_argument("--system-desc", type=Path, required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--chip", required=True)
    parser.add_argument("--compiler", type=Compiler.model_validate_json, required=True,
                        help="the compiler build (opbyop.compiler.builds.Compiler, as JSON)")
    parser.add_argument("--host-devices", type=int, default=None, help="XLA:CPU devices for golden runs "
                        "(a sharded op's host mesh); default OPBYOP_HOST_DEVICES")
    args = parser.parse_args(argv)
    serve(Connection(args.in_fd, writable=False), Connection(args.out_fd, readable=False),
          args.system_desc, args.workspace, args.chip, args.compiler, args.host_devices)
    sys.exit(0)


if __name__ == "__main__":
    main()
