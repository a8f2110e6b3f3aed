"""Ops that are in a module but are not ops of the model: test-harness checks and annotations.

StableHLO's own op tests end in `stablehlo.custom_call @check.expect_close(%result, %expected)`
(also check.expect_eq, check.expect_almost_eq, check.eq ...); frontends leave annotations such as
device placement hints. They are recorded as skipped with the reason, never as compiler failures,
blockers or pass-rate entries, and the whole-model view checks the value they check, not the check.
"""

from __future__ import annotations

from typing import Any

HARNESS_PREFIXES = ("check.",)  # the `check` dialect of StableHLO's interpreter tests, as custom calls
ANNOTATION_TARGETS = frozenset({"annotate_device_placement"})


def custom_call_target(op_name: str, attributes: dict[str, Any]) -> str | None:
    if op_name != "stablehlo.custom_call":
        return None
    target = attributes.get("call_target_name")
    return target if isinstance(target, str) else None


def not_a_model_op(op_name: str, attributes: dict[str, Any]) -> str | None:
    """Why this op is not an op of the model (a reason to skip it), or None when it is one."""
    if op_name.startswith("check."):  # the check dialect itself, when a context knows it
        return f"not an op of the model: test-harness check {op_name}"
    target = custom_call_target(op_name, attributes)
    if target is None:
        return None
    if target.startswith(HARNESS_PREFIXES):
        return f"not an op of the model: test-harness check @{target}"
    if target in ANNOTATION_TARGETS:
        return f"not an op of the model: annotation @{target}"
    return None


def is_harness_check(op_name: str, attributes: dict[str, Any]) -> bool:
    target = custom_call_target(op_name, attributes)
    return op_name.startswith("check.") or (target is not None and target.startswith(HARNESS_PREFIXES))
