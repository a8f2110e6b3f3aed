"""The simulator's coverage of what the compiler emits, and golden pass rates per TTNN op and dtype.

Input: one CoverageRow per analysed op (from a corpus results directory, or from the store's
results with their `ttnn_runtime` artifacts). A TTNN op counts as simulated when the executor has
a kernel for it (or handles it itself); its golden pass rate is taken over the programs that use
it, counting only the device's verdicts (Status.is_verdict, of a status with a program).

Runs on ttsim (`--device ttsim`) are counted per TTNN op too: a program that ran there counts for
every op it uses; one that stopped counts against the op ttsim or tt-metal stopped at, with its
words (ttsim's limits and tt-metal's rejections, grouped by message).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from opbyop.corpus.case import DTYPE_NAMES
from opbyop.corpus.run import CorpusResult
from opbyop.device.executor import CONTROL_OPS
from opbyop.device.kernels import KERNELS
from opbyop.device.kernels.ccl import KERNELS as COLLECTIVES
from opbyop.records import Fault, Status, TtsimOutcome, legacy_status

# Statuses that say something about the device run (compile failures never reach the simulator).
DEVICE_VERDICTS = frozenset(s for s in Status if s.is_verdict and not s.facts.no_program)
# What stops a compiled op short of a pass: a device verdict against it, or opbyop's own gap or bug.
SHORT_OF_A_PASS = frozenset(s for s in Status if (s in DEVICE_VERDICTS and s.is_failure) or s.fault is Fault.OPBYOP)


@dataclass(frozen=True)
class CoverageRow:
    label: str  # corpus file or op signature
    op: str  # the StableHLO op
    dtype: str
    status: Status
    message: str | None
    ttnn_ops: tuple[str, ...]
    chip: str = ""
    variant: str = ""
    form: str = ""
    narrowing: str | None = None
    ttsim: TtsimOutcome | None = None  # how the program fared on ttsim, where it was run there
    ttsim_op: str | None = None  # the TTNN op it stopped at
    ttsim_message: str | None = None

    @classmethod
    def from_corpus(cls, r: CorpusResult) -> CoverageRow:
        run = r.result.ttsim
        return cls(label=r.entry.file, op=r.entry.op, dtype=DTYPE_NAMES.get(r.entry.dtype, r.entry.dtype),
                   status=legacy_status(r.result.status, r.result.message), message=r.result.message,
                   ttnn_ops=tuple(r.ttnn_ops), chip=r.chip, variant=r.entry.variant, form=r.entry.form.value,
                   narrowing=r.result.narrowing, ttsim=run.outcome if run else None,
                   ttsim_op=run.op if run else None, ttsim_message=run.message if run else None)


def simulated(ttnn_op: str) -> bool:
    """A chip's kernel, the executor itself, or the mesh (a collective) runs it."""
    return ttnn_op in KERNELS or ttnn_op in CONTROL_OPS or ttnn_op in COLLECTIVES


@dataclass
class OpCoverage:
    ttnn_op: str
    programs: int = 0
    not_simulated_runs: int = 0  # runs that stopped as not_simulated naming this op
    passes: Counter = field(default_factory=Counter)  # dtype -> device verdicts that passed
    verdicts: Counter = field(default_factory=Counter)  # dtype -> device verdicts
    ttsim: Counter = field(default_factory=Counter)  # TtsimOutcome -> programs (ran: using it; else: stopped at it)

    @property
    def simulated(self) -> bool:
        return simulated(self.ttnn_op)

    @property
    def pass_rate(self) -> float | None:
        total = sum(self.verdicts.values())
        return sum(self.passes.values()) / total if total else None


@dataclass
class DtypeRates:
    dtype: str
    statuses: Counter = field(default_factory=Counter)

    @property
    def compiled(self) -> int:
        return sum(n for s, n in self.statuses.items() if not s.facts.no_program)

    @property
    def verdicts(self) -> int:
        return sum(self.statuses[s] for s in DEVICE_VERDICTS)

    @property
    def pass_rate(self) -> float | None:
        return self.statuses[Status.SUCCESS] / self.verdicts if self.verdicts else None

    @property
    def unreached(self) -> int:
        """Compiled, but no verdict because of opbyop itself (not simulated, its simulator or analyzer failed)."""
        return sum(n for s, n in self.statuses.items() if s.fault is Fault.OPBYOP)


@dataclass
class Coverage:
    ops: list[OpCoverage]
    dtypes: list[DtypeRates]
    rows: list[CoverageRow]

    @property
    def simulated_share(self) -> float:
        """Share of the emitted TTNN ops the current simulator implements."""
        seen = [o for o in self.ops if o.programs]
        return sum(o.simulated for o in seen) / len(seen) if seen else 1.0

    @property
    def missing_in_runs(self) -> list[str]:
        """TTNN ops these results' own runs named as not simulated (what the simulator that
        produced them lacked, whatever the current one has)."""
        return sorted(o.ttnn_op for o in self.ops if o.not_simulated_runs)

    @property
    def compiled(self) -> int:
        return sum(d.compiled for d in self.dtypes)

    @property
    def unreached(self) -> int:
        """Compiled ops without a verdict because of opbyop itself (not simulated, or an analyzer
        error: a simulator exception or a golden reference XLA cannot give)."""
        return sum(d.unreached for d in self.dtypes)

    @property
    def dtype_names(self) -> list[str]:
        return [d.dtype for d in self.dtypes]

    @property
    def on_ttsim(self) -> list[CoverageRow]:
        return [r for r in self.rows if r.ttsim is not None]

    def ttsim_stops(self) -> list[tuple[TtsimOutcome, str, str, int]]:
        """(outcome, TTNN op, message, programs) for every way ttsim or tt-metal stopped a program,
        most frequent first (ttsim's limits and tt-metal's rejections in their own words)."""
        found = Counter((r.ttsim, r.ttsim_op or "", r.ttsim_message or "") for r in self.on_ttsim
                        if r.ttsim is not TtsimOutcome.RAN)
        return [(o, op, m, n) for (o, op, m), n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0][0].value))]

    def failures(self, statuses: Iterable[Status] = SHORT_OF_A_PASS) -> list[CoverageRow]:
        wanted = set(statuses)
        return sorted((r for r in self.rows if r.status in wanted), key=lambda r: (r.status.value, r.op, r.dtype, r.label))


DTYPE_ORDER = ("f32", "bf16", "f16", "f64", "i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "complex64")


def coverage(rows: Iterable[CoverageRow]) -> Coverage:
    rows = list(rows)
    ops: dict[str, OpCoverage] = {}
    dtypes: dict[str, DtypeRates] = defaultdict(lambda: DtypeRates(""))
    for row in rows:
        rates = dtypes[row.dtype]
        rates.dtype = row.dtype
        rates.statuses[row.status] += 1
        for name in row.ttnn_ops:
            op = ops.setdefault(name, OpCoverage(name))
            op.programs += 1
            if row.status in DEVICE_VERDICTS:
                op.verdicts[row.dtype] += 1
                op.passes[row.dtype] += row.status is Status.SUCCESS
            if row.status is Status.NOT_SIMULATED and row.message and name in row.message:
                op.not_simulated_runs += 1
            if row.ttsim is TtsimOutcome.RAN:
                op.ttsim[row.ttsim] += 1
        if row.ttsim not in (None, TtsimOutcome.RAN) and (row.ttsim_op or "").startswith(("ttnn.", "ttcore.")):
            ops.setdefault(row.ttsim_op, OpCoverage(row.ttsim_op)).ttsim[row.ttsim] += 1
    order = {d: i for i, d in enumerate(DTYPE_ORDER)}
    return Coverage(ops=sorted(ops.values(), key=lambda o: (o.simulated, -o.programs, o.ttnn_op)),
                    dtypes=sorted(dtypes.values(), key=lambda d: (order.get(d.dtype, 99), d.dtype)), rows=rows)
