"""Expected depths, checked in (configs/expectations.yaml), and every run compared against them.

An entry names ops by signature prefix or by op kind (op_name) and gives the depth they are
expected to reach; ops without an entry are expected to reach `default_depth` (GOLDEN). Like the
xfail sets of torch-mlir, both directions are reported: an op that stops short of its expectation is
an unexpected failure, an op that gets further is an unexpected pass (update the file, so that the
expectations stay current and a later regression is caught).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from opbyop.atomic import write_text
from opbyop.config import config_dir, load_yaml
from opbyop.errors import ConfigError
from opbyop.records import OpRecord, OpResult, Stage, Status
from opbyop_storage.aggregate import run_query
from opbyop_storage.readonly import StoreConnection

SIGNATURE_PREFIX = 16  # hex digits written by `expectations update`: unique in any realistic zoo

HEADER = """\
# Expected depth of ops that do not (yet) get through the whole pipeline; ops not listed are
# expected to reach `default_depth`. Entries match by `signature` (a prefix of the op's sha256
# signature; the longest matching prefix wins) or by `op_kind` (the StableHLO op name); a signature
# entry beats an op_kind entry. Every run is compared against this file: ops that stop short of
# their expectation are unexpected failures, ops that get further are unexpected passes.
# Regenerate from a run with: opbyop expectations update --run RUN_ID
"""


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signature: str | None = Field(None, pattern=r"^[0-9a-f]{8,64}$", description="prefix of the op's signature")
    op_kind: str | None = Field(None, pattern=r"^[a-z_]+\.[a-z_0-9.]+$", description="op name, e.g. stablehlo.sort")
    depth: Stage
    reason: str = ""

    @model_validator(mode="after")
    def _one_key(self) -> Expectation:
        if (self.signature is None) == (self.op_kind is None):
            raise ValueError("give exactly one of signature or op_kind")
        return self

    @property
    def key(self) -> str:
        return f"signature {self.signature}" if self.signature else f"op_kind {self.op_kind}"


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    default_depth: Stage = Stage.GOLDEN
    expectations: list[Expectation] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_keys(self) -> Expectations:
        seen: set[str] = set()
        for e in self.expectations:
            if e.key in seen:
                raise ValueError(f"two entries for {e.key}")
            seen.add(e.key)
        return self

    def rule_for(self, signature: str, op_name: str) -> Expectation | None:
        by_signature = [e for e in self.expectations if e.signature and signature.startswith(e.signature)]
        if by_signature:
            return max(by_signature, key=lambda e: len(e.signature or ""))
        return next((e for e in self.expectations if e.op_kind == op_name), None)

    def expected(self, signature: str, op_name: str) -> Stage:
        rule = self.rule_for(signature, op_name)
        return rule.depth if rule else self.default_depth


def default_path() -> Path:
    return config_dir() / "expectations.yaml"


def load_expectations(path: Path | None = None) -> Expectations:
    path = path or default_path()
    try:
        return Expectations.model_validate(load_yaml(path) or {})
    except ValidationError as e:
        raise ConfigError(f"{path} holds invalid expectations:\n{e}",
                          "fix the entries named above, or regenerate with `opbyop expectations update --run RUN_ID`"
                          ) from None


def save_expectations(expectations: Expectations, path: Path | None = None) -> Path:
    """Write the file atomically, entries sorted (op kinds first), so diffs stay readable."""
    path = path or default_path()
    data = expectations.model_dump(mode="json", exclude_none=True)
    body = yaml.safe_dump(data, sort_keys=False, width=110, allow_unicode=True)
    return write_text(path, HEADER + body)


@dataclass(frozen=True)
class OpOutcome:
    """What the comparison needs of one unique op's result in a run (from records or from SQL rows)."""

    signature: str
    op_name: str
    status: Status
    depth: Stage
    failed_stage: Stage | None = None
    message: str | None = None
    models: tuple[str, ...] = ()
    occurrences: int = 0


def outcomes(results: list[OpResult], ops: list[OpRecord] = ()) -> list[OpOutcome]:
    """From records: each result with the models its op occurs in."""
    models: dict[str, set[str]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    for op in ops:
        if op.ok:
            models[op.signature].add(op.model)
            count[op.signature] += 1
    return [OpOutcome(r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message,
                      tuple(sorted(models[r.signature])), count[r.signature]) for r in results]


def run_outcomes(root: Path | str | None, run_id: str) -> list[OpOutcome]:
    """From the store, through one SQL query (fast on runs with tens of thousands of ops)."""
    with StoreConnection(root) as con:
        rows = run_query(con, "run_ops", run_id=run_id).records()
    return [OpOutcome(r["signature"], r["op_name"], Status(r["status"]), Stage(r["depth"]),
                      Stage(r["failed_stage"]) if r["failed_stage"] else None, r["message"],
                      tuple(r["models"]), r["occurrences"]) for r in rows]


class Mismatch(BaseModel):
    signature: str
    op_name: str
    expected: Stage
    actual: Stage
    status: Status
    failed_stage: Stage | None
    message: str | None
    rule: str  # the entry that set the expectation, or 'default'
    models: list[str]
    occurrences: int


class ExpectationReport(BaseModel):
    run_id: str
    checked: int = 0
    matched: int = 0
    not_compared: int = 0  # ops short of their expectation without a verdict (skipped, opbyop's or infra's)
    unexpected_failures: list[Mismatch] = Field(default_factory=list)
    unexpected_passes: list[Mismatch] = Field(default_factory=list)
    # short of their expectation because of opbyop or the infrastructure (not_simulated, simulator_error,
    # analyzer_error, infra_error): neither the compiler's regression nor a reason to lower the expectation
    # (a frontend's failure, frontend_failed, is a verdict: compared like the compiler's)
    not_judged: list[Mismatch] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unexpected_failures and not self.unexpected_passes


def compare(run_id: str, ops: list[OpOutcome], expectations: Expectations) -> ExpectationReport:
    report = ExpectationReport(run_id=run_id)
    for r in sorted(ops, key=lambda r: (r.op_name, r.signature)):
        rule = expectations.rule_for(r.signature, r.op_name)
        expected = rule.depth if rule else expectations.default_depth
        report.checked += 1
        if r.depth.rank == expected.rank:
            report.matched += 1
            continue
        if not r.status.is_verdict and r.depth.rank < expected.rank:
            report.not_compared += 1
            if r.status is not Status.SKIPPED:
                report.not_judged.append(_mismatch(r, expected, rule))
            continue
        mismatch = _mismatch(r, expected, rule)
        (report.unexpected_failures if r.depth.rank < expected.rank else report.unexpected_passes).append(mismatch)
    return report


def _mismatch(r: OpOutcome, expected: Stage, rule: Expectation | None) -> Mismatch:
    return Mismatch(signature=r.signature, op_name=r.op_name, expected=expected, actual=r.depth,
                            status=r.status, failed_stage=r.failed_stage, message=r.message,
                    rule=rule.key if rule else "default", models=list(r.models), occurrences=r.occurrences)


def _reason(r: OpOutcome) -> str:
    first = r.message.strip().splitlines()[0][:160] if r.message and r.message.strip() else ""
    stage = r.failed_stage.value if r.failed_stage else "?"
    return f"{r.status.value} at {stage}: {first}".rstrip(": ")


def from_outcomes(ops: list[OpOutcome], previous: Expectations | None = None) -> Expectations:
    """Expectations that a run meets exactly: every op short of GOLDEN gets an entry, grouped into
    one op_kind entry when every op of that kind stopped at the same depth (at least two of them).
    Reasons written by hand in `previous` are kept; ops without a verdict (skipped, opbyop's or the
    infrastructure's) keep their previous entry."""
    previous = previous or Expectations()
    kept_reason = {e.key: e.reason for e in previous.expectations}
    by_kind: dict[str, list[OpOutcome]] = defaultdict(list)
    for r in ops:
        by_kind[r.op_name].append(r)
    entries: list[Expectation] = []
    for kind, group in sorted(by_kind.items()):
        measured = [r for r in group if r.status.is_verdict]
        depths = {r.depth for r in measured}
        if len(measured) >= 2 and len(measured) == len(group) and len(depths) == 1 and Stage.GOLDEN not in depths:
            key = f"op_kind {kind}"
            entries.append(Expectation(op_kind=kind, depth=depths.pop(),
                                       reason=kept_reason.get(key) or _reason(measured[0])))
            continue
        for r in sorted(group, key=lambda r: r.signature):
            if not r.status.is_verdict:  # no verdict to expect: what was expected stays
                old = previous.rule_for(r.signature, r.op_name)
                if old is not None and old.signature:
                    entries.append(old)
                continue
            if r.depth is Stage.GOLDEN:
                continue
            prefix = r.signature[:SIGNATURE_PREFIX]
            entries.append(Expectation(signature=prefix, depth=r.depth,
                                       reason=kept_reason.get(f"signature {prefix}") or f"{r.op_name}: {_reason(r)}"))
    unique = list({e.key: e for e in entries}.values())
    unique.sort(key=lambda e: (e.signature is not None, e.op_kind or "", e.signature or ""))
    return Expectations(default_depth=previous.default_depth, expectations=unique)
