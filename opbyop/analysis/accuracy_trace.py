"""Where a whole model loses accuracy: each TTNN op's output on the device against the value of the
StableHLO op it came from, in XLA:CPU's run of the same whole model.

Every op of @main gets a location of its own, `loc("opbyop.N"(<its own location>))` (the compiler
keeps locations from StableHLO down to TTNN, and the original stays inside). XLA:CPU runs a copy of
the module whose @main also returns every op's result, beside the device's run. While the device
runs the program, each TTNN op whose location names op N is kept; once it is done, the last such op
of N is N's output on the device, compared with op N's value when it has op N's shape. Ops are then
listed in model order (its depth).
On a mesh every chip's output is kept: a chip holding the whole value is compared with it (the worst
chip counts), shards are assembled into the global value first (each dimension the chips hold
smaller split over the mesh axis of that ratio).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func

from opbyop.device.mesh import MeshError, infer_sharding
from opbyop.golden.compare import finite_pcc, pcc
from opbyop.ir.context import make_context
from opbyop.ir.parse import parse_module
from opbyop.ir.rewrite import body_ops, main_func
from opbyop.records import AccuracyTrace, TracePoint

_TAG = re.compile(r"opbyop\.(\d+)")
# Not compared: constants, and ops that only move values (they add no error; a bert-base has
# hundreds, each one more output for XLA:CPU to keep and one more comparison).
SKIPPED_OPS = frozenset({"stablehlo.constant", "stablehlo.iota", "stablehlo.reshape", "stablehlo.broadcast_in_dim",
                         "stablehlo.transpose"})


@dataclass
class TaggedModule:
    """The module with one location per op, and what the trace needs of each op."""

    text: str  # what the compiler compiles
    all_outputs_text: str  # the same, its @main also returning every traced op's results (XLA:CPU)
    ops: dict[int, tuple[str, tuple[int, ...], str]] = field(default_factory=dict)  # N -> (name, shape, location)
    producers: dict[int, list[int]] = field(default_factory=dict)  # N -> the traced ops feeding it
    consumers: dict[int, list[int]] = field(default_factory=dict)  # N -> the ops it feeds
    traced: list[int] = field(default_factory=list)  # N of each extra result of all_outputs_text, in order
    outputs: int = 0  # results @main returned before
    intermediate_bytes: int = 0

    @property
    def key(self) -> str:
        """XLA:CPU's cache key of the all-outputs module (the same model compiles once per machine)."""
        return "accuracy-trace-" + hashlib.sha256(self.all_outputs_text.encode()).hexdigest()

    def fused_candidates(self, n: int) -> list[int]:
        """The ops whose value an op tagged n may compute when the compiler fused them into it."""
        return _fused_candidates(self.consumers, n)


CLOSE_ENOUGH = 1e-2  # max abs error relative to the reference's largest magnitude (at least 1)
FUSION_DEPTH = 3  # how many consumers deep a fused op's value may lie


def _fused_candidates(consumers: dict[int, list[int]], n: int) -> list[int]:
    found, frontier = [], [n]
    for _ in range(FUSION_DEPTH):
        frontier = [m for k in frontier for m in consumers.get(k, [])]
        found += frontier
    return list(dict.fromkeys(found))


def tag_module(module_text: str, name: str = "<module>") -> TaggedModule:
    """Give each op of @main its own location; build the all-outputs copy for XLA:CPU."""
    ctx = make_context()
    with ctx, ir.Location.unknown(ctx):
        module = parse_module(module_text, ctx, name)
        main = main_func(module, name)
        tagged = TaggedModule(text="", all_outputs_text="")
        index_of: dict[ir.Value, int] = {}
        extra: list[ir.Value] = []
        for n, op in enumerate(body_ops(main)):
            location = str(op.location)
            op.location = ir.Location.name(f"opbyop.{n}", childLoc=op.location)
            tagged.producers[n] = sorted({index_of[v] for v in op.operands if v in index_of})
            for m in tagged.producers[n]:
                tagged.consumers.setdefault(m, []).append(n)
            for result in op.results:
                index_of[result] = n  # untraced ops too: the trace's inputs are found through them
            if op.name in SKIPPED_OPS or len(op.results) != 1 or not isinstance(op.results[0].type, ir.RankedTensorType):
                continue
            result = op.results[0]
            shape = tuple(ir.RankedTensorType(result.type).shape)
            tagged.ops[n] = (op.name, shape, location)
            extra.append(result)
            tagged.traced.append(n)
            element = ir.RankedTensorType(result.type).element_type
            width = getattr(element, "width", 32) if not isinstance(element, ir.IndexType) else 64
            tagged.intermediate_bytes += int(np.prod(shape, dtype=np.int64)) * max(1, width // 8)
        tagged.text = module.operation.get_asm(enable_debug_info=True)
        terminator = [o.operation for o in main.regions[0].blocks[0].operations][-1]
        returned = list(terminator.operands)
        tagged.outputs = len(returned)
        with ir.InsertionPoint(terminator), terminator.location:
            func.ReturnOp([*returned, *extra])
        terminator.erase()
        inputs = [a.type for a in main.regions[0].blocks[0].arguments]
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(inputs, [v.type for v in [*returned, *extra]]))
        if "res_attrs" in main.attributes:
            del main.attributes["res_attrs"]
        tagged.all_outputs_text = module.operation.get_asm()
    return tagged


def traced(op: object) -> bool:
    """The op's location names an op of the model (so its output is one the trace may compare)."""
    return bool(_TAG.search(getattr(op, "location", "") or ""))


class TraceObserver:
    """Called by the device's executor after each op: keeps, per op of the model, the last TTNN
    output that names it; compare() then judges each against XLA:CPU's value, once."""

    def __init__(self, tagged: TaggedModule, references: dict[int, np.ndarray], threshold: float,
                 mesh_shape: tuple[int, int] = (1, 1)):
        self.tagged = tagged
        self.references = references
        self.threshold = threshold
        self.mesh_shape = mesh_shape
        self.latest: dict[int, dict[int, tuple[str, np.ndarray]]] = {}  # N -> chip -> (TTNN op, its output)
        self.shaped: dict[int, dict[int, tuple[str, np.ndarray]]] = {}  # the same, of op N's own shape
        self.seconds = 0.0  # XLA:CPU's run and the comparisons: what the trace costs

    def __call__(self, op: object, values: list[np.ndarray], chip: int = 0) -> None:
        tags = _TAG.findall(getattr(op, "location", "") or "")
        if tags and len(values) == 1:
            # an op that merged several carries each one's location: it ends at the latest
            n, output = max(int(t) for t in tags), (getattr(op, "name", ""), values[0])
            self.latest.setdefault(n, {})[chip] = output
            if n in self.tagged.ops and _same_shape(np.shape(values[0]), self.tagged.ops[n][1]):
                self.shaped.setdefault(n, {})[chip] = output

    def compare(self) -> dict[int, TracePoint]:
        started = time.perf_counter()
        points: dict[int, TracePoint] = {}
        for n in sorted(self.latest):
            # op N's value in its own shape, where one was seen: the compiler may end N's ops with a step
            # towards the next op (a max pool's NHWC output cast for the convolution after it), the same
            # size as N's value but not in its order
            point = self._mesh_point(n, {**self.latest[n], **self.shaped.get(n, {})})
            if point is not None:
                points[point.position] = point
        self.latest.clear()
        self.shaped.clear()
        self.seconds += time.perf_counter() - started
        return points

    def _mesh_point(self, n: int, chips: dict[int, tuple[str, np.ndarray]]) -> TracePoint | None:
        """One chip's point; on a mesh the worst chip's (each holding the whole value) or the point of
        the value assembled from the chips' shards."""
        if len(chips) == 1:
            ttnn_op, values = next(iter(chips.values()))
            return self._point(n, ttnn_op, np.asarray(values))
        ttnn_op = chips[min(chips)][0]
        first = np.asarray(chips[min(chips)][1])
        expected = self.references.get(n)
        if expected is not None and first.size != expected.size and len(chips) == self.mesh_shape[0] * self.mesh_shape[1]:
            local = _as_rank(first.shape, expected.ndim)  # TTNN's 4-d tiles of a 2-d value: leading 1s dropped
            try:
                if local is None:
                    raise ValueError(f"a {first.shape} shard of a {expected.shape} value")
                sharding = infer_sharding(expected.shape, local, self.mesh_shape)
                whole = sharding.gather([np.asarray(chips[c][1]).reshape(local) for c in sorted(chips)],
                                        self.mesh_shape)
            except (MeshError, ValueError):
                return None  # a step towards op n's value on each chip, not its value
            return self._point(n, ttnn_op, whole)
        found = [p for c in sorted(chips) if (p := self._point(n, chips[c][0], np.asarray(chips[c][1]))) is not None]
        return min(found, key=lambda p: (p.pcc if p.pcc is not None else 2.0, -p.max_abs_error), default=None)

    def _point(self, n: int, ttnn_op: str, actual: np.ndarray) -> TracePoint | None:
        # The compiler fuses consumers into an op under the op's location (an add with a relu
        # activation; a sum, reshape and divide into one mean): when its output is not its own value
        # but matches a consumer's, it is that consumer's.
        got: np.ndarray | None = None  # the device's value in float64, converted once for every candidate
        best: tuple[float, int, np.ndarray, float] | None = None
        for m in [n, *self.tagged.fused_candidates(n)]:
            expected = self.references.get(m)
            if expected is None or actual.size != expected.size:
                continue  # a step towards op m's value (padded, permuted, partial), not its value
            if got is None:
                got = np.asarray(actual, dtype=np.float64).ravel()
            want = np.asarray(expected, dtype=np.float64).ravel()
            error, scale = _max_error(got, want)
            relative = error / max(scale, 1.0)  # values near zero: absolute error
            relative = relative if np.isfinite(relative) else float("inf")
            if m == n:
                best = (relative, m, want, error)
                if relative <= CLOSE_ENOUGH:
                    break  # its own value: no fusion to look for
            elif relative <= CLOSE_ENOUGH:
                best = (relative, m, want, error)  # a consumer's value, fused into it
                break
        if best is None:
            return None
        assert got is not None
        relative, m, want, error = best
        # a finite max error: every element of both is finite (inf or NaN on either side makes it inf or NaN)
        score = finite_pcc(got, want) if np.isfinite(error) else _nonfinite_pcc(got, want)
        name, _, location = self.tagged.ops[m]
        # near-constant values make PCC meaningless: an op within 1% of its reference is not below
        below = score is not None and score < self.threshold and relative > CLOSE_ENOUGH
        return TracePoint(position=m, op_name=name, ttnn_op=ttnn_op, pcc=score, max_abs_error=error,
                          location=location, below_threshold=below)


def _max_error(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(max |got - want|, max |want|) of float64 vectors; NaN when either holds a NaN."""
    if not want.size:
        return 0.0, 0.0
    with np.errstate(all="ignore"):
        diff = np.subtract(got, want)
        np.abs(diff, out=diff)
        return float(diff.max()), float(max(want.max(), -want.min()))


def _nonfinite_pcc(a: np.ndarray, e: np.ndarray) -> float | None:
    with np.errstate(all="ignore"):
        return pcc(a, e)


def _same_shape(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """The same shape once leading 1s are dropped (TTNN keeps a 2-d value as 4-d tiles)."""
    return _without_leading_ones(a) == _without_leading_ones(b)


def _without_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _as_rank(shape: tuple[int, ...], rank: int) -> tuple[int, ...] | None:
    """`shape` with leading 1s dropped (or added) to `rank` dimensions; None when it cannot be."""
    shape = tuple(shape)
    while len(shape) > rank and shape[0] == 1:
        shape = shape[1:]
    return (1,) * (rank - len(shape)) + shape if len(shape) <= rank else None


def references_by_op(tagged: TaggedModule, all_outputs: list[np.ndarray]) -> dict[int, np.ndarray]:
    return {n: np.asarray(v) for n, v in zip(tagged.traced, all_outputs[tagged.outputs:])}


def summarise(tagged: TaggedModule, points: dict[int, TracePoint], threshold: float, seconds: float) -> AccuracyTrace:
    """The points in model order, the first below `threshold`, and what each op added to the error
    (its own loss of PCC beyond the worst of its inputs')."""
    ordered = [points[n] for n in sorted(points)]
    for p in ordered:
        inputs = [points[m].pcc for m in _traced_inputs(tagged, p.position, points)]
        worst_input = min((q for q in inputs if q is not None), default=1.0)
        if p.pcc is not None:
            p.added_loss = max(0.0, worst_input - p.pcc)
    first = next((p for p in ordered if p.below_threshold), None)
    worst = sorted((p for p in ordered if p.added_loss > 0), key=lambda p: -p.added_loss)[:10]
    return AccuracyTrace(points=ordered, pcc_threshold=threshold, first_below=first.position if first else None,
                         first_below_op=first.op_name if first else None, most_added=[p.position for p in worst],
                         traced_ops=len(tagged.traced), seconds=seconds)


def _traced_inputs(tagged: TaggedModule, n: int, points: dict[int, TracePoint]) -> list[int]:
    """The traced ops whose values reach op n (through untraced ones, e.g. a missing comparison)."""
    seen, stack, found = set(), list(tagged.producers.get(n, [])), []
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in points:
            found.append(m)
        else:
            stack.extend(tagged.producers.get(m, []))
    return found


# "auto" traces a model whose intermediate values (every op's result, kept by XLA:CPU) fit here.
AUTO_TRACE_BYTES = 1 << 30


def in_brief(trace: AccuracyTrace) -> str:
    """One line for a console: how many ops were compared, the first below the threshold, the worst."""
    if trace.message:
        return f"no accuracy trace: {trace.message}"
    line = f"{len(trace.points)} of {trace.traced_ops} ops compared"
    if trace.first_below is not None:
        line += f", first below pcc {trace.pcc_threshold}: {trace.first_below_op} (op {trace.first_below})"
    worst = trace.worst
    if worst is not None:
        pcc_text = f"{worst.pcc:.5f}" if worst.pcc is not None else "none"
        line += f", worst: {worst.op_name} as {worst.ttnn_op} (op {worst.position}, pcc {pcc_text})"
    return line


def trace_plan(module_text: str, name: str, mode: str) -> tuple[TaggedModule | None, str | None]:
    """The tagged module to compile and trace, or None with why not ("off", or too big for "auto")."""
    if mode == "off":
        return None, None
    try:
        tagged = tag_module(module_text, name)
    except Exception as e:  # the whole-model run goes on untraced
        return None, f"the module could not be tagged for the accuracy trace: {type(e).__name__}: {e}"
    if mode == "auto" and tagged.intermediate_bytes > AUTO_TRACE_BYTES:
        return None, (f"not traced: its intermediate values take {tagged.intermediate_bytes:,} B, over the "
                      f"{AUTO_TRACE_BYTES:,} B of 'auto' (ask for it: accuracy_trace 'on')")
    return tagged, None


def finish_trace(plan: TaggedModule | None, observer: TraceObserver | None, note: str | None,
                 threshold: float) -> AccuracyTrace | None:
    if observer is None:  # not asked for (no note), or not possible (the note says why)
        return AccuracyTrace(pcc_threshold=threshold, message=note) if note else None
    assert plan is not None
    points = observer.compare()
    return summarise(plan, points, threshold, observer.seconds)
