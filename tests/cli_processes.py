"""Helpers of the tests that run a CLI command as a user does and stop it: waiting for a condition,
the op its op worker is made to hang on, and the processes it started."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from opbyop.frontends.loader import load_model
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module


def poll(what: str, check, timeout: float = 300.0, every: float = 1.0):  # noqa: ANN001
    """check() until it returns something true; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def hanging_op() -> tuple[str, int]:
    """A signature prefix of one of jax-mlp's ops (its op worker hangs on it: OPBYOP_FAULT_INJECT,
    so the run cannot end by itself), and how many unique ops jax-mlp has."""
    ops = dedupe(split_module(load_model("jax-mlp").module_text, "jax-mlp").ops)
    return next(op for op in ops if op.op_name == "stablehlo.tanh").signature[:16], len(ops)


def own_services(proc: subprocess.Popen) -> list[psutil.Process]:
    """Every process `proc` started, which must include a Prefect server and a Dask cluster of its own."""
    found = psutil.Process(proc.pid).children(recursive=True)
    assert any("uvicorn" in " ".join(p.cmdline()) for p in found)  # its own Prefect server
    assert any("opbyop_flows.hosting.cluster" in " ".join(p.cmdline()) for p in found)  # its own Dask cluster
    return found


def all_gone(processes: list[psutil.Process]) -> None:
    def gone():
        return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    poll("every process the CLI started to be gone", gone, timeout=120)
