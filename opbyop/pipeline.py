"""The steps before the per-op fan-out, shared by the CLI and the Prefect tasks.

Models are loaded and split one by one: a model that cannot be loaded, exported or split is
recorded with its error and the others carry on (peers' defect 8: '0 ops processed').
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pydantic import BaseModel

from opbyop.artifacts import ArtifactStore
from opbyop.config import Zoo, load_zoo
from opbyop.errors import OpbyopError
from opbyop.frontends.graph import ModelGraph
from opbyop.frontends.dumps import spec_name
from opbyop.frontends.loader import expand_specs, load_model
from opbyop.golden.upstream import attach, needed_values
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import SplitResult, split_module
from opbyop.op_memory import process_out_of_memory
from opbyop.records import ModelSummary, Occurrence, OpRecord, OpResult, Stage, Status, UniqueOp, WholeModelResult


@dataclass
class Prepared:
    """Every model of a run, split and deduplicated."""

    graphs: dict[str, ModelGraph] = field(default_factory=dict)
    splits: dict[str, SplitResult] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # model -> why it produced no ops
    unique: list[UniqueOp] = field(default_factory=list)
    # model -> {position: XLA's message}: upstream ops whose values could not be computed (their
    # dependents got random inputs instead of real ones)
    upstream_failures: dict[str, dict[int, str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # model -> the spec it was loaded from

    @property
    def records(self) -> list[OpRecord]:
        return [r for s in self.splits.values() for r in s.ops]


def prepare_model(spec: str, zoo: Zoo, seed: int = 0) -> tuple[ModelGraph | None, SplitResult | None, str | None]:
    """(graph, split, error): never raises for the model's own faults."""
    try:
        graph = load_model(spec, zoo=zoo, seed=seed)
        return graph, split_module(graph.module_text, graph.name), None
    except OpbyopError as e:
        return None, None, str(e)
    except MemoryError:  # the model's values do not fit this process: said with the figures and the fix
        return None, None, process_out_of_memory(f"loading {spec}")
    except Exception as e:  # an exporter crash must not take the other models with it
        return None, None, f"{type(e).__name__}: {e}"


PrepareOne = Callable[[str, Zoo, int], tuple[ModelGraph | None, SplitResult | None, str | None]]


def prepare(specs: Sequence[str], zoo: Zoo | None = None, seed: int = 0,
            prepare_one: PrepareOne = prepare_model, artifacts: ArtifactStore | None = None) -> Prepared:
    """Every model split, one after another (torch.export keeps global state: two exports at once
    fail with 'CURRENT_PATCHER is None'), then deduplicated. `prepare_one` lets the flow run each
    model as its own task. With `artifacts`, arguments whose values the model's constants fix get
    those values (golden.upstream, on XLA:CPU in this process), stored there for the workers.
    A folder of IR dumps is one model per dumped module (frontends.dumps)."""
    zoo = zoo or load_zoo()
    prepared = Prepared()
    for spec in expand_specs(specs):
        graph, split, error = prepare_one(spec, zoo, seed)
        name = _free_name(graph.name if graph is not None else spec_name(spec), prepared)
        if graph is not None and name != graph.name:  # two specs, one name (a dump folder named like a zoo model)
            graph, split = _renamed(graph, split, name)
        prepared.sources[name] = spec
        if error is not None:
            prepared.errors[name] = error
            continue
        prepared.graphs[name] = graph
        prepared.splits[name] = split
    prepared.unique = dedupe(prepared.records)
    if artifacts is not None and any(needed_values(r) for r in prepared.records if r.ok):
        from opbyop.golden.xla_cpu import XlaCpu

        prepared.upstream_failures = attach(prepared.unique, prepared.splits, XlaCpu(), artifacts)
    return prepared


def _free_name(name: str, prepared: Prepared) -> str:
    """`name`, or `name.2`, `name.3` ... when an earlier spec of the run already took it."""
    taken = prepared.sources.keys()
    candidate, k = name, 1
    while candidate in taken:
        k += 1
        candidate = f"{name}.{k}"
    return candidate


def _renamed(graph: ModelGraph, split: SplitResult | None, name: str) -> tuple[ModelGraph, SplitResult | None]:
    graph.notes.append(f"renamed from {graph.name}: an earlier model of the run has that name")
    graph.name = name
    if split is not None:
        split = split.model_copy(update={"model": name,
                                         "ops": [r.model_copy(update={"model": name}) for r in split.ops]})
    return graph, split


def summarize(name: str, prepared: Prepared, whole: WholeModelResult | None = None) -> ModelSummary:
    split = prepared.splits.get(name)
    graph = prepared.graphs.get(name)
    if split is None:
        return ModelSummary(model=name, frontend="", ops_total=0, ops_unique=0, error=prepared.errors.get(name))
    return ModelSummary(model=name, frontend=graph.frontend if graph else "", ops_total=len(split.ops),
                        ops_unique=len({r.signature for r in split.ops if r.ok}), split_failures=len(split.failed),
                        export_seconds=graph.export_seconds if graph else 0.0, whole=whole)


def depth_histogram(records: Iterable[OpRecord], results: dict[str, OpResult]) -> Counter:
    """Occurrences per depth reached (a split failure counts at SPLIT with nothing beyond)."""
    counts: Counter = Counter()
    for r in records:
        result = results.get(r.signature)
        counts[result.depth if result is not None else Stage.SPLIT] += 1
    return counts


def blocking_ops(records: Iterable[OpRecord], results: dict[str, OpResult]) -> list[tuple[OpResult, int]]:
    """Unique ops the compiler or the device failed, most occurrences first: what to fix first (opbyop's
    own gaps, not_simulated and analyzer_error, are not the compiler's blockers)."""
    weight: Counter = Counter(r.signature for r in records if r.ok)
    failing = [(results[s], n) for s, n in weight.items() if s in results and results[s].status.is_verdict
               and results[s].status is not Status.SUCCESS]
    return sorted(failing, key=lambda item: (-item[1], item[0].depth.rank))


class ManifestModel(BaseModel):
    name: str
    source: str  # the spec it was loaded from (a dump file: `<file>#<name>`)
    ops: int = 0
    unique: int = 0
    error: str | None = None


class ManifestOp(BaseModel):
    signature: str
    op_name: str
    inputs: list[str]
    outputs: list[str]
    models: list[str]  # every model the op came from
    occurrences: list[Occurrence]  # every (model, position)


class Manifest(BaseModel):
    """The unique ops of a set of models, each with every model it came from (global dedupe)."""

    models: list[ManifestModel]
    ops_total: int
    ops_unique: int
    ops: list[ManifestOp]


def manifest(prepared: Prepared) -> Manifest:
    models = [ManifestModel(name=name, source=prepared.sources.get(name, name), ops=len(split.ops),
                            unique=len({r.signature for r in split.ops if r.ok}))
              for name, split in prepared.splits.items()]
    models += [ManifestModel(name=name, source=prepared.sources.get(name, name), error=error)
               for name, error in prepared.errors.items()]
    ops = [ManifestOp(signature=op.signature, op_name=op.op_name, inputs=[str(t) for t in op.inputs],
                      outputs=[str(t) for t in op.outputs], models=op.models, occurrences=op.occurrences)
           for op in prepared.unique]
    return Manifest(models=models, ops_total=len(prepared.records), ops_unique=len(ops), ops=ops)


def run_manifest_path(workspace_root: Path, run_id: str) -> Path:
    """Where a run's manifest goes: beside its report."""
    return Path(workspace_root) / "reports" / f"{run_id}.manifest.json"


def write_manifest(prepared: Prepared, path: Path) -> Path:
    """The manifest as JSON at `path` (written whole or not at all)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(manifest(prepared).model_dump_json(indent=1))
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)
    return path
