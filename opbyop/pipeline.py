"""The steps before the per-op fan-out, shared by the CLI and the Prefect tasks.

Models are loaded and split one by one: a model that cannot be loaded, exported or split is
recorded with its error and the others carry on (one model that fails to split never leaves a run with '0 ops processed').
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel

from opbyop import atomic
from opbyop.artifacts import ArtifactStore
from opbyop.compiler.targets import Target
from opbyop.config import ExportBudget, Zoo, load_zoo
from opbyop.errors import OpbyopError
from opbyop.frontends.specs import spec_name
from opbyop.frontends.failures import failure_records
from opbyop.graph import ArgumentKind, ModelGraph
from opbyop.frontends.export_cache import ExportCache
from opbyop.frontends.loader import expand_specs, load_model
from opbyop.golden.upstream_cache import attach_kept
from opbyop.ir.dedupe import Deduper
from opbyop.ir.mesh import check_fits, module_mesh
from opbyop.ir.sharding import strip_shardings
from opbyop.ir.split import SplitResult, split_module
from opbyop.ir.split_cache import SplitCache
from opbyop.op_memory import process_out_of_memory
from opbyop.records import (ModelSummary, Occurrence, OpRecord, OpResult, Provenance, Stage, Status, UniqueOp,
                            WholeModelResult)


@dataclass
class Prepared:
    """Every model of a run, split and deduplicated."""

    graphs: dict[str, ModelGraph] = field(default_factory=dict)
    splits: dict[str, SplitResult] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # model -> why it produced no ops
    # model -> {position: XLA's message}: upstream ops whose values could not be computed (their
    # dependents got random inputs instead of real ones)
    upstream_failures: dict[str, dict[int, str]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # model -> the spec it was loaded from
    _deduper: Deduper = field(default_factory=Deduper, repr=False)

    @property
    def unique(self) -> list[UniqueOp]:
        """The run's unique ops, first seen first (settled ones as settled_op left them)."""
        return list(self._deduper.unique.values())

    @property
    def records(self) -> list[OpRecord]:
        return [r for s in self.splits.values() for r in s.ops]

    def add(self, spec: str, graph: ModelGraph | None, split: SplitResult | None, error: str | None, *,
            artifacts: ArtifactStore | None = None, target: Target | None = None,
            unshard: bool = False, reuse: bool = True) -> tuple[str, list[UniqueOp]]:
        """One more model (prepare_model's outcome for `spec`): (its name in the run, the unique ops
        it brings that no model before it had). A name an earlier model took gets a suffix (`name.2`).
        With `target`, a sharded model must fit its mesh (never silently one chip: an error for that
        model, or with `unshard` its shardings removed, noted on the model). With `artifacts`, the
        new ops' arguments whose values the model's constants fix get those values (golden.upstream,
        on XLA:CPU in this process), stored there for the workers: an op's values come from the
        first model that brings it; with `reuse`, those kept for the same model are not computed
        again (golden.upstream_cache)."""
        name = _free_name(graph.name if graph is not None else split.model if split is not None
                          else spec_name(spec), self)
        if graph is not None and name != graph.name:  # two specs, one name (a dump folder named like a zoo model)
            graph, split = _renamed(graph, split, name)
        self.sources[name] = spec
        if error is None and graph is not None and target is not None:
            graph, split, error = _fit_target(graph, split, target, unshard)
        if error is not None or split is None:
            self.errors[name] = error or "no ops"
            return name, []
        if graph is not None:
            self.graphs[name] = graph
        self.splits[name] = split
        new = self._deduper.add(split.ops)
        if artifacts is not None and graph is not None and new:
            failed = attach_kept(new, name, split, graph, artifacts, argument_names(graph), reuse=reuse)
            self.upstream_failures.update(failed)
        return name, new

    def settle(self, name: str, kept: Sequence[UniqueOp] = ()) -> None:
        """Let go of what a model's analysis no longer needs once its ops and whole model are handed
        out and its records are with the sink: its module text, weights and eager outputs, and of each
        op record all but what the run's end counts (settled_record); of the unique ops it brought that
        are `kept` in the workspace's op index, all but what the run's end reads (settled_op). The
        graph, split and ops are replaced, not changed: another run, or the executor, may share them
        (Splits splits a model once)."""
        graph, split = self.graphs.get(name), self.splits.get(name)
        shared = SettledParts()
        if graph is not None:
            self.graphs[name] = replace(graph, module_text="", argument_values=None, reference_outputs=None)
        if split is not None:
            self.splits[name] = split.model_copy(update={"ops": [settled_record(r, shared) for r in split.ops]})
        self._deduper.replace([settled_op(op, shared) for op in kept])


@dataclass(frozen=True)
class SettledParts:
    """The empty parts a model's settled records share (one set per model): a settled record is read,
    never changed."""

    provenance: Provenance = field(default_factory=Provenance)
    empty: list = field(default_factory=list)
    attributes: dict = field(default_factory=dict)
    fields_set: set = field(default_factory=set)


def settled_record(record: OpRecord, shared: SettledParts) -> OpRecord:
    """An op record as a run keeps it once the sink has it: which op it is and whether it split (what
    the run's summaries count). Its module, operands, tensors and source stack are let go of, and its
    empty parts are `shared`'s: 0.6 KB instead of 7.6 KB per record (gpt2's); a run of a few hundred
    models counts them in the 100,000s."""
    return OpRecord.model_construct(
        shared.fields_set, model=record.model, position=record.position, op_name=record.op_name,
        signature=sys.intern(record.signature), attributes=shared.attributes, operands=shared.empty,
        inputs=shared.empty, input_sources=shared.empty, outputs=shared.empty, provenance=shared.provenance,
        module_text=None, split_error=record.split_error, mesh=record.mesh, operand_shardings=shared.empty,
        result_shardings=shared.empty, frontend_error=record.frontend_error)


def settled_op(op: UniqueOp, shared: SettledParts) -> UniqueOp:
    """A unique op as a run keeps it once it is handed out and kept in the workspace's op index:
    its name, tensors and occurrences (the same list: later models still add theirs), what the
    run's summary and manifest read. Its module, operands, provenance and values are read back from
    the index when needed (the shrink of failing ops): a run of hundreds of models has 10,000s."""
    return UniqueOp.model_construct(
        op.model_fields_set, signature=op.signature, op_name=op.op_name, module_text="",
        attributes=shared.attributes, inputs=op.inputs, outputs=op.outputs, operands=shared.empty,
        provenance=shared.provenance, occurrences=op.occurrences, input_values=shared.attributes,
        mesh=op.mesh, operand_shardings=op.operand_shardings, result_shardings=op.result_shardings,
        synthetic_reasons=shared.attributes, frontend_error=op.frontend_error)


def prepare_model(spec: str, zoo: Zoo, seed: int = 0, budget: ExportBudget | None = None, weights: bool = True,
                  exports: ExportCache | None = None, splits: SplitCache | None = None
                  ) -> tuple[ModelGraph | None, SplitResult | None, str | None]:
    """(graph, split, error): never raises for the model's own faults. A factory's export runs in a
    child process within `budget` (frontends.isolation): past it, it is this model's error. An
    export is taken from `exports` (default: the machine's export cache) while nothing it read has
    changed, a split from `splits` (default: the machine's split cache) while its graph is the same.
    Without `weights` the graph has none of its weights' values (a run with no whole model needs none)."""
    try:
        graph = load_model(spec, zoo=zoo, seed=seed, budget=budget, weights=weights, exports=exports)
        split, kept = (splits or SplitCache()).split(graph, split_graph)
        if kept:
            graph.notes.append("split reused from the machine's cache (the same module)")
        return graph, split, None
    except OpbyopError as e:
        return None, None, str(e)
    except MemoryError:  # the model's values do not fit this process: said with the figures and the fix
        return None, None, process_out_of_memory(f"loading {spec}")
    except Exception as e:  # an exporter crash must not take the other models with it
        return None, None, f"{type(e).__name__}: {e}"


def split_graph(graph: ModelGraph) -> SplitResult:
    """The graph's module split into its ops, followed by the framework ops its frontend could not lower."""
    split = split_module(graph.module_text, graph.name)
    if graph.frontend_failures:
        split.ops.extend(failure_records(graph, len(split.ops)))
    return split


def prepare(specs: Sequence[str], zoo: Zoo | None = None, seed: int = 0, artifacts: ArtifactStore | None = None,
            target: Target | None = None, unshard: bool = False, budget: ExportBudget | None = None) -> Prepared:
    """Every model split, one after another (torch.export keeps global state: two exports at once
    fail with 'CURRENT_PATCHER is None'), each added to one Prepared (Prepared.add: deduplicated,
    checked against `target`, upstream values into `artifacts`). A run does the same while it
    analyses (opbyop.run.models: the ops of a model fan out as soon as it is split). A folder of IR
    dumps is one model per dumped module (frontends.dumps). Each export within `budget`."""
    zoo = zoo or load_zoo()
    prepared = Prepared()
    for spec in expand_specs(specs):
        graph, split, error = prepare_model(spec, zoo, seed, budget)
        prepared.add(spec, graph, split, error, artifacts=artifacts, target=target, unshard=unshard)
    return prepared


def _fit_target(graph: ModelGraph, split: SplitResult | None, target: Target,
                unshard: bool) -> tuple[ModelGraph, SplitResult | None, str | None]:
    """(graph, split, error): a sharded model checked against the target's chips (ir.mesh)."""
    mesh = module_mesh(graph.module_text)
    if mesh is None:
        return graph, split, None
    try:
        if unshard and target.chips == 1:  # a new graph: the split one may be another run's too
            graph = replace(graph, module_text=strip_shardings(graph.module_text, graph.name), notes=[
                *graph.notes, f"unsharded: its mesh ({mesh}) and shardings were removed to analyse it on one chip "
                "(--unshard)"])
            return graph, split_graph(graph), None
        check_fits(mesh, target.chips, graph.name, f"{target.chip} ({target.mesh_text})", target.mesh)
    except OpbyopError as e:
        return graph, split, str(e)
    return graph, split, None


def argument_names(graph: ModelGraph) -> dict[int, str]:
    """How op records name the model's @main arguments whose values are not real."""
    names = {}
    for i, a in enumerate(graph.arguments):
        if a.kind is ArgumentKind.PARAMETER and not a.buffer:
            names[i] = f"the weight {a.name}"
        elif a.kind is ArgumentKind.UNLOWERED:
            names[i] = f"{a.name}, a result of an op the frontend could not lower"
        else:
            names[i] = f"{'the buffer ' if a.buffer else 'the argument '}{a.name}, known by shape and dtype only"
    return names


def _free_name(name: str, prepared: Prepared) -> str:
    """`name`, or `name.2`, `name.3` ... when an earlier spec of the run already took it."""
    taken = prepared.sources.keys()
    candidate, k = name, 1
    while candidate in taken:
        k += 1
        candidate = f"{name}.{k}"
    return candidate


def _renamed(graph: ModelGraph, split: SplitResult | None, name: str) -> tuple[ModelGraph, SplitResult | None]:
    """New graph and split under `name` (those given may be another run's too)."""
    graph = replace(graph, name=name, notes=[*graph.notes, f"renamed from {graph.name}: an earlier model of the "
                                                           "run has that name"])
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
    """The manifest whole (write_manifest streams the same document)."""
    return Manifest(models=_manifest_models(prepared), ops_total=len(prepared.records),
                    ops_unique=len(prepared.unique), ops=[_manifest_op(op) for op in prepared.unique])


def _manifest_models(prepared: Prepared) -> list[ManifestModel]:
    models = [ManifestModel(name=name, source=prepared.sources.get(name, name), ops=len(split.ops),
                            unique=len({r.signature for r in split.ops if r.ok}))
              for name, split in prepared.splits.items()]
    return models + [ManifestModel(name=name, source=prepared.sources.get(name, name), error=error)
                     for name, error in prepared.errors.items()]


def _manifest_op(op: UniqueOp) -> ManifestOp:
    return ManifestOp(signature=op.signature, op_name=op.op_name, inputs=[str(t) for t in op.inputs],
                      outputs=[str(t) for t in op.outputs], models=op.models, occurrences=op.occurrences)


def run_manifest_path(workspace_root: Path, run_id: str) -> Path:
    """Where a run's manifest goes: beside its report."""
    return Path(workspace_root) / "reports" / f"{run_id}.manifest.json"


def write_manifest(prepared: Prepared, path: Path) -> Path:
    """The manifest as JSON at `path` (written whole or not at all), an op at a time: a run of
    hundreds of models has 10,000s of unique ops, and their document is never whole in memory."""
    head = Manifest(models=_manifest_models(prepared), ops_total=len(prepared.records),
                    ops_unique=len(prepared.unique), ops=[]).model_dump_json()
    closing = '[]}'  # "ops" is the document's last field: its ops are written in place of its empty list
    assert head.endswith('"ops":' + closing), "Manifest.ops must stay the manifest's last field"
    with atomic.atomic_path(path) as partial, partial.open("w") as out:
        out.write(head.removesuffix(closing) + "[")
        for i, op in enumerate(prepared.unique):
            out.write(("," if i else "") + _manifest_op(op).model_dump_json())
        out.write(closing[1:])
    return Path(path)
