"""Search a failing op's neighbourhood: where does it start failing?

One op, one analyser (a warm OpWorker, or the cluster's), a time budget. In order, as long as the
budget lasts:
1. the op as found (its own result, the reference for everything else);
2. its shape in each other element type the chip holds;
3. each dimension, in the op's own dtype: halved (a failing op) or doubled (a passing one) until
   the outcome flips, then bisected between the two sizes, then one step the other way;
4. the same for each other dtype the op also fails in.
Every variant is a new single-op module (opbyop.shrink.variants), split like any op (its own
signature), put in the op index and the artifact store: `opbyop repro` replays any of them.
The budget is checked between variants: one variant already running is never cut short (its own
time limit is the op's), so a search may end up to one variant after its budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from opbyop.artifacts import ArtifactStore
from opbyop.ir.dedupe import dedupe
from opbyop.ir.split import split_module
from opbyop.records import OpResult, UniqueOp
from opbyop.shrink.result import Outcome, ShrinkBoundary, ShrinkResult, ShrinkVariant, outcome_of
from opbyop.shrink.variants import Dimension, OpModule, Rejected

Analyse = Callable[[UniqueOp], OpResult]
GROW_STEPS = 3  # a passing op is grown up to 8x
BISECT_STEPS = 12  # down to adjacent sizes across 4096 (the budget stops it earlier if need be)


@dataclass
class _Search:
    """One dimension in one dtype: the sizes to try next, from the outcomes so far."""

    dimension: Dimension
    dtype: str
    toward: Outcome  # the outcome we are looking for: PASS below a failing op, FAIL above a passing one
    tried: dict[int, Outcome] = field(default_factory=dict)
    signatures: dict[int, str] = field(default_factory=dict)
    bisected: int = 0
    other_way_done: bool = False

    def chain(self) -> list[int]:
        s = self.dimension.size
        if self.toward is Outcome.PASS:  # halve down to 1
            sizes, x = [], s // 2
            while x >= 1:
                sizes.append(x)
                x //= 2
            return sizes
        return [s * 2 ** k for k in range(1, GROW_STEPS + 1)]

    def next_size(self) -> int | None:
        for size in self.chain():
            if size not in self.tried:
                return size
            if self.tried[size] is self.toward:
                break
        flipped = [x for x, o in self.tried.items() if o is self.toward]
        if flipped and self.bisected < BISECT_STEPS:
            near = min(flipped, key=lambda x: abs(x - self.dimension.size))
            same = [x for x, o in self.tried.items() if o is _other(self.toward)] + [self.dimension.size]
            between = [x for x in same if min(near, self.dimension.size) <= x <= max(near, self.dimension.size)]
            far = min(between, key=lambda x: abs(x - near))
            mid = (near + far) // 2
            if abs(far - near) > 1 and mid not in self.tried:
                self.bisected += 1
                return mid
        if not self.other_way_done:
            self.other_way_done = True
            s = self.dimension.size
            step = s * 2 if self.toward is Outcome.PASS else s // 2
            if step >= 1 and step not in self.tried:
                return step
        return None

    @property
    def analysed(self) -> dict[int, Outcome]:
        return {x: o for x, o in self.tried.items() if o is not Outcome.REJECTED}

    def boundary(self, baseline: Outcome, baseline_signature: str) -> ShrinkBoundary:
        outcomes = {**self.analysed, self.dimension.size: baseline}
        signatures = {**self.signatures, self.dimension.size: baseline_signature}
        passing = [x for x, o in outcomes.items() if o is Outcome.PASS]
        failing = [x for x, o in outcomes.items() if o is Outcome.FAIL]
        lp = max(passing) if passing else None
        sf = min(failing) if failing else None
        return ShrinkBoundary(dimension=self.dimension.label, dtype=self.dtype, size=self.dimension.size,
                              largest_passing=lp, largest_passing_signature=signatures.get(lp) if lp else None,
                              smallest_failing=sf, smallest_failing_signature=signatures.get(sf) if sf else None,
                              tried=sorted(outcomes))


def _other(outcome: Outcome) -> Outcome:
    return Outcome.FAIL if outcome is Outcome.PASS else Outcome.PASS


class Shrinker:
    """Searches one op's neighbourhood with `analyse` (compile, device, golden of one UniqueOp)."""

    def __init__(self, analyse: Analyse, artifacts: ArtifactStore | None = None,
                 put_op: Callable[[UniqueOp], None] | None = None, budget_s: float = 60.0):
        self.analyse = analyse
        self.artifacts = artifacts
        self.put_op = put_op
        self.budget_s = budget_s

    def shrink(self, op: UniqueOp, baseline: OpResult | None = None) -> ShrinkResult:
        started = time.monotonic()
        deadline = started + self.budget_s
        found = baseline or self.analyse(op)
        outcome = outcome_of(found.status, found.depth)
        result = ShrinkResult(signature=op.signature, op_name=op.op_name, inputs=op.inputs, dtype="",
                              baseline=outcome, baseline_status=found.status, baseline_stage=found.failed_stage,
                              baseline_message=found.message, budget_s=self.budget_s)
        try:
            module = OpModule(op.module_text, op.signature[:12])
        except Exception as e:  # an op the rewriter cannot read: no variants, said so
            result.note = f"no variants: the op's module cannot be read for rewriting: {type(e).__name__}: {e}"
            result.seconds = time.monotonic() - started
            return result
        result.dtype = module.dtype
        if outcome is Outcome.NO_VERDICT:
            result.note = f"the op has no verdict ({found.status.value}): nothing to compare variants with"
            result.seconds = time.monotonic() - started
            return result
        result.dtypes[module.dtype] = outcome
        result.dtype_signatures[module.dtype] = op.signature

        for dtype in module.other_dtypes():  # the op's own shape in every other dtype
            if time.monotonic() > deadline:
                result.complete = False
                break
            variant = self._try(module, result, op, {}, dtype, "")
            result.dtypes[dtype] = variant.outcome
            if variant.signature:
                result.dtype_signatures[dtype] = variant.signature

        searches = [_Search(d, module.dtype, _other(outcome)) for d in module.dimensions]
        searches += [_Search(d, dtype, Outcome.PASS) for dtype, o in result.dtypes.items()
                     if dtype != module.dtype and o is Outcome.FAIL for d in module.dimensions]
        result.complete = self._run(searches, module, result, op, deadline) and result.complete
        baselines = {module.dtype: (outcome, op.signature)}
        baselines.update({t: (o, result.dtype_signatures.get(t, "")) for t, o in result.dtypes.items()})
        result.boundaries = [s.boundary(*baselines[s.dtype]) for s in searches if s.analysed]
        result.seconds = time.monotonic() - started
        return result

    def _run(self, searches: list[_Search], module: OpModule, result: ShrinkResult, op: UniqueOp,
             deadline: float) -> bool:
        """Round robin over the searches, one variant each turn; False when the budget ran out."""
        active = list(searches)
        while active:
            for search in list(active):
                if time.monotonic() > deadline:
                    return False
                size = search.next_size()
                if size is None:
                    active.remove(search)
                    continue
                dtype = None if search.dtype == module.dtype else search.dtype
                variant = self._try(module, result, op, {search.dimension.index: size}, dtype, search.dimension.label)
                search.tried[size] = variant.outcome
                if variant.signature:
                    search.signatures[size] = variant.signature
        return True

    def _try(self, module: OpModule, result: ShrinkResult, op: UniqueOp, sizes: dict[int, int], dtype: str | None,
             label: str) -> ShrinkVariant:
        start = time.monotonic()
        size = next(iter(sizes.values()), None)
        dtype_name = dtype or module.dtype
        try:
            unique = self._unique(module.variant(sizes, dtype), op)
        except Rejected as e:
            result.rejected += 1
            variant = ShrinkVariant(dimension=label, dtype=dtype_name, size=size, outcome=Outcome.REJECTED,
                                    message=str(e), seconds=time.monotonic() - start)
            result.variants.append(variant)
            return variant
        analysed = self.analyse(unique)
        variant = ShrinkVariant(dimension=label, dtype=dtype_name, size=size, signature=unique.signature,
                                inputs=unique.inputs, outcome=outcome_of(analysed.status, analysed.depth),
                                status=analysed.status, failed_stage=analysed.failed_stage, message=analysed.message,
                                seconds=time.monotonic() - start,
                                module_artifact=self.artifacts.put(unique.module_text.encode(), ".mlir")
                                if self.artifacts is not None else None)
        result.variants.append(variant)
        return variant

    def _unique(self, text: str, op: UniqueOp) -> UniqueOp:
        """The variant as a unique op, split like any other (so its signature is canonical)."""
        split = split_module(text, f"shrink.{op.signature[:12]}")
        record = split.ops[-1]
        if not record.ok:
            raise Rejected(f"the variant cannot be split: {record.split_error}")
        (unique,) = dedupe([record])
        unique = unique.model_copy(update={"provenance": op.provenance})
        if self.put_op is not None:
            self.put_op(unique)
        return unique

