"""A run's models are split one after another in a thread of their own, and each model's ops are
analysed as soon as it is split, while the next one exports."""

from __future__ import annotations

import threading
import time
import weakref
from concurrent.futures import Future
from pathlib import Path

import numpy as np

import pytest

from core_fixtures import DATA
from opbyop.config import AnalysisConfig, load_zoo
from opbyop.graph import ModelGraph
from opbyop.pipeline import prepare_model, summarize
from opbyop.records import Stage, Status
from opbyop.run.engine import execute
from opbyop.run.local import LocalExecutor
from opbyop.run.models import HANDED_BACK, Arrivals, ModelAsk, PlaceRefused, SplitOutcome, Splits
from opbyop.run.plan import RunPlan
from opbyop.workspace import Workspace

SLOW_FACTORY = '''
import threading
import time
import torch


def slow_small():
    """A model whose factory takes a few seconds (a large model's export, in small)."""
    time.sleep(6)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh()), [torch.ones(2, 4)]


def after_the_first_model():
    """A model whose factory takes until the run has analysed the model before it (two minutes at
    most): a large model's export, however loaded the machine."""
    deadline = time.monotonic() + 120
    while not os.path.exists(FIRST_MODEL_ANALYSED) and time.monotonic() < deadline:
        time.sleep(0.1)
    return slow_small()
'''


@pytest.fixture
def slow_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    marker = tmp_path / "first-model-analysed"
    (tmp_path / "slow_factories.py").write_text(f"import os\nFIRST_MODEL_ANALYSED = {str(marker)!r}\n{SLOW_FACTORY}")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "slow_factories:slow_small"


def test_a_model_asked_twice_is_split_once_and_in_the_order_asked():
    splits = Splits()
    first = splits.ask([str(DATA / "tanh_matmul_chain.mlir"), str(DATA / "cholesky.mlir")], 0)
    again = splits.ask([str(DATA / "cholesky.mlir")], 0)
    other_seed = splits.ask([str(DATA / "cholesky.mlir")], 1)
    assert again.futures[0][2] is first.futures[1][2]  # the same split, not a second one
    assert other_seed.futures[0][2] is not first.futures[1][2]
    arrived = list(first.arriving(idle=lambda: None))
    assert [Path(m.spec).name for m in arrived] == ["tanh_matmul_chain.mlir", "cholesky.mlir"]
    assert all(m.error is None and m.split is not None and m.seconds > 0 for m in arrived)


def test_a_model_is_let_go_of_once_every_run_that_asked_has_taken_it_unless_kept():
    splits, chain = Splits(), str(DATA / "tanh_matmul_chain.mlir")
    splits.prefetch([chain], 0)
    one, two = splits.ask([chain], 0), splits.ask([chain], 0)
    first = next(one.arriving(idle=lambda: None))
    assert (chain, 0, True, True) in splits.futures  # the second run has not taken it yet
    assert next(two.arriving(idle=lambda: None)) is first
    assert not splits.futures  # taken by both: a run of many models holds only those still to come
    with splits.kept():
        kept = next(splits.ask([chain], 0).arriving(idle=lambda: None))
        assert next(splits.ask([chain], 0).arriving(idle=lambda: None)) is kept  # split once within kept()
    assert not splits.futures and kept is not first  # asked again after it was let go of: split again


@pytest.mark.slow
def test_a_run_without_whole_models_gets_no_weights_from_the_export_and_its_ops_still_succeed(tmp_path, monkeypatch):
    (tmp_path / "weighted.py").write_text(
        "import torch\n\ndef small():\n    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh()), [torch.ones(2, 4)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    splits = Splits()
    with_weights, without = (next(splits.ask(["weighted:small"], 0, weights=w).arriving(idle=lambda: None))
                             for w in (True, False))
    kinds = [a.kind.value for a in without.graph.arguments]
    assert kinds == ["input", "parameter", "parameter"]
    assert [v is None for v in without.graph.argument_values] == [False, True, True]  # the input's value kept
    assert all(v is not None for v in with_weights.graph.argument_values)
    assert without.split.ops and [o.signature for o in without.split.ops] == [o.signature for o in with_weights.split.ops]
    config = AnalysisConfig(models=["weighted:small"], chip="p150", whole_model=False, reuse_cached=False)
    assert not config.keeps_weights
    workspace = Workspace(tmp_path / "home")
    outcome = execute(RunPlan.from_config(config), Splits().ask(config.models, 0, weights=config.keeps_weights),
                      LocalExecutor(workspace, "weightless"), workspace=workspace)
    assert outcome.results and all(r.status is Status.SUCCESS for r in outcome.results.values())


def test_a_model_taken_by_a_run_is_not_held_by_its_arrivals_while_the_next_one_is_awaited():
    def done(name: str) -> Future:
        weights = [np.ones((256, 256), np.float32)]
        graph = ModelGraph(name=name, frontend="torch", module_text="", arguments=[], argument_values=weights)
        future: Future = Future()
        future.set_result(SplitOutcome(name, graph, None, None))
        return future

    waiting = Future()  # the next model, still exporting
    models = Arrivals([("a", ("a", 0, True), done("a")), ("b", ("b", 0, True), waiting)])
    seen: list[weakref.ref] = []
    arriving = models.arriving(idle=lambda: waiting.set_result(SplitOutcome("b", None, None, "stopped")))
    first = next(arriving)
    seen.append(weakref.ref(first.graph.argument_values[0]))
    del first  # the run is done with it
    assert seen[0]() is None  # nothing else holds the weights, while model b is awaited
    assert next(arriving).spec == "b"


MODULES = [str(DATA / f"{name}.mlir") for name in ("arith_constant", "cholesky", "const_eval_weight",
                                                    "constant_fed_chain", "f64_scale", "gather_middle_dim")]


def eventually(condition, seconds: float = 60.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_run_slower_than_its_splits_has_at_most_read_ahead_models_split_and_waiting():
    splits = Splits(read_ahead=2)
    arriving = splits.ask(MODULES, 0).arriving(idle=lambda: None)
    taken = [next(arriving)]
    assert eventually(lambda: splits.waiting() == 2)  # the two after the one taken, split
    time.sleep(1.0)  # time enough to split every other model, were it not for the bound
    assert splits.waiting() == 2
    taken += list(arriving)  # taking them makes room for the rest
    assert [o.spec for o in taken] == MODULES and all(o.error is None for o in taken)
    splits.close()


class Refusing:
    """A place that takes no export (a cluster whose workers offer no export resource, in small)."""

    def prepare(self, ask: ModelAsk) -> Future:
        refused: Future = Future()
        threading.Timer(0.5, refused.set_exception, [PlaceRefused("no worker offers the export resource")]).start()
        return refused


def test_a_model_handed_back_is_prepared_before_the_models_waiting_for_room(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBYOP_CACHE_DIR", str(tmp_path / "cache"))  # nothing kept: jax-mlp must be exported
    splits = Splits(read_ahead=1)
    models = ["jax-mlp", *MODULES[:3]]
    arrivals = splits.ask(models, 0, zoo=load_zoo(), place=Refusing())
    taken: list[SplitOutcome] = []
    run = threading.Thread(target=lambda: taken.extend(arrivals.arriving(idle=lambda: None)), daemon=True)
    run.start()
    run.join(300)
    splits.close()
    assert not run.is_alive(), "the run waits for the model handed back, behind models waiting for room"
    outcomes = taken
    assert [o.spec for o in outcomes] == models and all(o.error is None for o in outcomes)
    assert any(note.startswith(HANDED_BACK) for note in outcomes[0].graph.notes)


class Timed(LocalExecutor):
    """The local executor, noting when each batch of ops it was handed was done (the first: in the
    file `marker` too)."""

    def __init__(self, marker: Path, *args, **kwargs):  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.marker = marker
        self.done: list[float] = []

    def submit(self, ops, wholes) -> None:  # noqa: ANN001
        super().submit(ops, wholes)
        self.done.append(time.monotonic())
        self.marker.touch()


@pytest.mark.slow
def test_the_first_models_ops_are_analysed_while_the_next_model_exports(slow_factory, tmp_path):
    workspace = Workspace(tmp_path / "home")
    # the second model's factory waits for the first model's ops to be analysed: a run that analysed
    # nothing before every model is split would wait two minutes for it, and fail below
    waiting = slow_factory.replace("slow_small", "after_the_first_model")
    config = AnalysisConfig(models=[str(DATA / "tanh_matmul_chain.mlir"), waiting], chip="p150",
                            whole_model=False, reuse_cached=False)
    plan = RunPlan.from_config(config)
    models = Splits().ask(config.models, 0)
    split_finished: list[float] = []
    models.futures[1][2].add_done_callback(lambda _: split_finished.append(time.monotonic()))
    executor = Timed(tmp_path / "first-model-analysed", workspace, "pipelined")
    outcome = execute(plan, models, executor, workspace=workspace)
    assert outcome.error is None
    assert set(outcome.prepared.splits) == {"tanh_matmul_chain", "slow_factories.after_the_first_model"}
    assert len(executor.done) == 2 and all(r.status is Status.SUCCESS for r in outcome.results.values())
    # the first model's ops were all analysed before the second model's split had finished
    assert executor.done[0] < split_finished[0] < executor.done[1]
    assert split_finished[0] - executor.done[0] < 100  # its factory saw the first model analysed


class StopsAfterFirst(LocalExecutor):
    """The local executor; the run is asked to stop once the first model's ops are handed out."""

    def __init__(self, stop: threading.Event, *args, **kwargs):  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.stop = stop

    def submit(self, ops, wholes) -> None:  # noqa: ANN001
        super().submit(ops, wholes)
        self.stop.set()


@pytest.mark.slow
def test_a_run_stopped_while_a_model_exports_ends_without_it_and_lets_it_go(slow_factory, tmp_path):
    workspace = Workspace(tmp_path / "home")
    config = AnalysisConfig(models=[str(DATA / "tanh_matmul_chain.mlir"), slow_factory], chip="p150",
                            whole_model=False, reuse_cached=False)
    splits, stop = Splits(), threading.Event()
    models = splits.ask(config.models, 0)
    outcome = execute(RunPlan.from_config(config), models, StopsAfterFirst(stop, workspace, "stopped"),
                      workspace=workspace, stop=stop.is_set)
    assert outcome.interrupted and outcome.error is None and set(outcome.prepared.splits) == {"tanh_matmul_chain"}
    assert all(r.status is Status.SUCCESS for r in outcome.results.values()) and outcome.results
    assert not splits.futures  # the model the run did not take is let go of
    splits.close()
    splits._thread.join(timeout=60)  # the export under way ends, then the thread
    assert not splits._thread.is_alive()


def test_a_run_keeps_of_each_op_record_and_success_only_what_its_summaries_count(tmp_path):
    """Once a model's ops are handed out and stored, its records keep their op and whether it split;
    the module, operands, tensors and source stack are let go of (a run of hundreds of models holds
    100,000s of records), and the summaries count as they did. Its unique ops keep their tensors and
    occurrences; the rest is read back from the workspace's op index. A flow run, which shows its
    results from the store, keeps of each success its status, not its compile, device and golden records."""
    workspace = Workspace(tmp_path / "home")
    chain = str(DATA / "tanh_matmul_chain.mlir")
    config = AnalysisConfig(models=[chain], chip="p150", whole_model=False, reuse_cached=False)
    outcome = execute(RunPlan.from_config(config), Splits().ask(config.models, 0), LocalExecutor(workspace, "settled"),
                      workspace=workspace, settle_successes=True)
    assert outcome.results and all(r.status is Status.SUCCESS and r.depth is Stage.GOLDEN and r.device is None
                                   and r.compile is None and r.golden is None for r in outcome.results.values())
    records = outcome.prepared.splits["tanh_matmul_chain"].ops
    _, whole, _ = prepare_model(chain, load_zoo())
    assert [(r.position, r.op_name, r.signature, r.ok) for r in records] == \
        [(r.position, r.op_name, r.signature, r.ok) for r in whole.ops]
    assert all(r.module_text is None and not r.operands and not r.inputs and not r.provenance.stack for r in records)
    assert any(r.operands for r in whole.ops)
    summary = summarize("tanh_matmul_chain", outcome.prepared)
    assert summary.ops_total == len(whole.ops) and summary.ops_unique == len({r.signature for r in whole.ops if r.ok})
    assert outcome.prepared.unique and all(op.module_text == "" and not op.operands for op in outcome.prepared.unique)
    for op in outcome.prepared.unique:
        kept = workspace.ops.get(op.signature)
        assert kept.module_text and (kept.inputs, kept.occurrences) == (op.inputs, op.occurrences)
