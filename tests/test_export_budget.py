"""A model's export runs in a child process with a memory and time budget: a model past it is that
model's error (or, bisected, its op's frontend_failed), and every other model goes on."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

from opbyop.config import ExportBudget, load_zoo
from opbyop.errors import ExportError
from opbyop.frontends.isolation import processes_memory
from opbyop.frontends.torch_export import LOWERING_SHARE, _lowered
from opbyop.pipeline import prepare
from opbyop.records import Status

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

FACTORIES = '''
import numpy as np
import torch

KEPT = []


def greedy():
    """Holds ever more memory while it builds its model (up to 4 GB, far past the test's budget)."""
    for _ in range(40):
        KEPT.append(np.ones(100_000_000 // 8))
    return torch.nn.Linear(4, 4), [torch.ones(1, 4)]


def small():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), [torch.ones(2, 4)]


def slow():
    import time
    time.sleep(60)
    return torch.nn.Linear(4, 4), [torch.ones(1, 4)]


class FillHalves(torch.nn.Module):
    """Two copies into the halves of a new_empty tensor, as DeepSeek-V2's expand_kv does."""

    def forward(self, a, b):
        out = a.new_empty(1, 2, 4, 16)
        out[..., :8].copy_(a)
        out[..., 8:].copy_(b)
        return torch.tanh(out)


def fill_halves():
    return FillHalves(), [torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)]
'''


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "budget_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "budget_factories"


def test_a_model_whose_export_goes_past_its_memory_budget_is_its_error_and_the_next_model_runs(factories):
    budget = ExportBudget(memory_bytes=int(2e9), timeout_s=120)
    prepared = prepare([f"{factories}:greedy", f"{factories}:small"], load_zoo(), budget=budget)
    (name, error), = prepared.errors.items()
    assert name.endswith("greedy")
    assert "memory budget of 2.00 GB" in error and "--export-memory" in error
    (graph,) = prepared.graphs.values()
    assert graph.name.endswith("small") and "stablehlo.dot_general" in graph.module_text


def test_opbyop_run_names_the_memory_budget_a_model_went_past_and_runs_the_next(factories, tmp_path):
    """--export-memory through the CLI: the greedy factory is its error, the small one is analysed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "OPBYOP_HOME": str(tmp_path / "home"),
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "run", f"{factories}:greedy", f"{factories}:small",
                           "--input", "1x4xf32", "--export-memory", "2", "--no-whole"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert "memory budget of 2.00 GB" in out and "--export-memory" in out, out
    assert "dot_general" in out and "success" in out, out


def test_opbyop_compile_names_the_time_budget_a_model_went_past_and_compiles_the_next(factories, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "OPBYOP_HOME": str(tmp_path / "home"),
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "compile", f"{factories}:slow", f"{factories}:small",
                           "--input", "1x4xf32", "--export-timeout", "10", "--no-whole"],  # small's export: ~3 s loaded
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = proc.stdout + proc.stderr
    assert "time budget of 10 s" in out and "--export-timeout" in out, out
    assert re.search(r"FLATBUFFER\W+13\b", out), out  # the small model's 13 ops, compiled


def test_a_model_whose_export_goes_past_its_time_budget_is_its_error(factories):
    prepared = prepare([f"{factories}:slow"], load_zoo(), budget=ExportBudget(timeout_s=3))
    (error,) = prepared.errors.values()
    assert "time budget of 3 s" in error and "--export-timeout" in error


LOWER_FILL = """
import importlib, json, os, sys
import torch
from torch_mlir.extras.fx_decomp_util import get_decomposition_table
from opbyop.config import ExportBudget
from opbyop.frontends.isolation import processes_memory
from opbyop.frontends.torch_export import LOWERING_SHARE, _lowered

model = importlib.import_module(sys.argv[1]).FillHalves()
program = torch.export.export(model, (torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)), strict=False)
program = program.run_decompositions(get_decomposition_table())
room = int(sys.argv[2])
held = processes_memory([os.getpid()])
budget = ExportBudget(memory_bytes=int((held + room) / LOWERING_SHARE), lowering_timeout_s=60)
lowered = _lowered(program, "fill", budget)
print(json.dumps({"text": lowered.text, "failures": [[f.aten_op, f.message, f.source] for f in lowered.failures]}))
"""


def test_a_lowering_past_its_budget_is_bisected_to_its_op_and_the_rest_is_lowered(factories, tmp_path):
    """The slice_scatter as torch-mlir itself lowers it (opbyop's decomposition left out): a blow-up
    whose words name no op. Lowered in a fresh process, as an export's child is in a run: the
    lowering's share of the budget counts the process that lowers, and a test process that holds what
    the suite loaded before (its forked lowering child copying those pages) leaves a share that
    depends on the tests before it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", LOWER_FILL, factories, str(int(1.2e9))], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lowered = json.loads(done.stdout.strip().splitlines()[-1])
    assert lowered["failures"], "the blow-up was not cut out"
    for aten_op, message, source in lowered["failures"]:
        assert aten_op == "aten.slice_scatter.default", message
        assert "memory budget" in message and "budget_factories.py:" in (source or "")
    assert "stablehlo.tanh" in lowered["text"]


def test_an_export_that_already_holds_its_lowerings_budget_is_given_up_with_the_fix_not_blamed_on_an_op(factories):
    """With no room left for torch-mlir's child, every attempt would fail on the budget and bisecting
    would blame whichever op it tried first."""
    model = importlib.import_module(factories).FillHalves()
    program = torch.export.export(model, (torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)), strict=False)
    held = processes_memory([os.getpid()])
    budget = ExportBudget(memory_bytes=int(held / LOWERING_SHARE), lowering_timeout_s=60)
    with pytest.raises(ExportError) as raised:
        _lowered(program.run_decompositions(get_decomposition_table()), "fill", budget)
    assert "before torch-mlir lowers its graph" in raised.value.problem
    assert "--export-memory" in raised.value.fix


def test_a_lowering_is_charged_its_own_memory_not_that_of_its_callers_other_children():
    """A library call beside other children of its process (an op worker, a server): only this process
    and the lowering's child count against the budget."""
    other = subprocess.Popen([sys.executable, "-c", "import sys, time; x = b'1' * 5_000_000_000; "
                              "print(flush=True); time.sleep(300)"], stdout=subprocess.PIPE)
    try:
        other.stdout.readline()  # its 5 GB are resident
        program = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh()),
                                      (torch.ones(2, 4),), strict=False)
        # 2.5 GB over what this process holds: half the other child's 5 GB. The lowering itself needs
        # about 0.1 GB, but this process is a test runner: what earlier tests left running in it (threads,
        # a forkserver sharing its pages) may grow its share while the lowering runs.
        budget = ExportBudget(memory_bytes=int((processes_memory([os.getpid()]) + 2.5e9) / LOWERING_SHARE),
                              lowering_timeout_s=60)
        lowered = _lowered(program.run_decompositions(get_decomposition_table()), "small", budget)
        text, failures = lowered.text, lowered.failures
    finally:
        other.kill()
        other.wait()
    assert not failures and "stablehlo.tanh" in text


def test_a_write_into_slices_exports_whole_and_its_ops_reach_the_golden(factories, workspace, worker, settings):
    """torch-mlir's own lowering of a slice_scatter grows without end; decomposed, it is slices and
    concatenations: no op cut out, no bisection, and every op the compiler accepts matches XLA."""
    start = time.perf_counter()
    prepared = prepare([f"{factories}:fill_halves"], load_zoo(), budget=ExportBudget(memory_bytes=int(1.5e9)),
                       artifacts=workspace.artifacts)
    assert time.perf_counter() - start < 30  # bisecting the blow-up took minutes
    assert not prepared.errors and not any(r.frontend_error for r in prepared.records)
    writes = [r for r in prepared.records if r.provenance.framework_op == "torch.copy_"]
    # new_empty is made as zeros: the halves are written into a constant
    assert {r.op_name for r in writes} <= {"stablehlo.slice", "stablehlo.concatenate", "stablehlo.constant"}
    assert {"stablehlo.slice", "stablehlo.concatenate"} <= {r.op_name for r in writes}
    results = [worker.analyze(op, settings) for op in prepared.unique]
    verdicts = {r.op_name: r.status for r in results}
    assert {"stablehlo.slice", "stablehlo.concatenate", "stablehlo.tanh"} <= set(verdicts)
    assert "tensor.empty" not in verdicts  # no StableHLO op: tt-mlir does not legalize it
    assert all(s is Status.SUCCESS for s in verdicts.values()), verdicts
