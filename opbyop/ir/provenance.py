"""Locations in, provenance out: which framework op, module and source line an op came from.

The torch frontend wraps each op's call-site chain in a named location that carries the framework
op, the module path and the aten op (torch-mlir records only file:line chains); JAX names its
locations after the primitive's name stack. Both are read back here.
"""

from __future__ import annotations

from pathlib import Path

from jaxlib.mlir import ir

from opbyop.records import Provenance, SourceFrame

_KEYS = {"fw": "framework_op", "module": "module_path", "aten": "aten_op"}
# Frames from these places are library internals, or opbyop's own export wrappers: not the user's model.
_FRONTENDS = Path(__file__).resolve().parents[1] / "frontends"
_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "<eval_with_key",
                    *(str(_FRONTENDS / f) for f in ("torch_export.py", "jax_export.py", "loader.py")))


def encode_name(framework_op: str | None, module_path: str | None, aten_op: str | None) -> str:
    """The name a torch op's location carries: `fw=torch.conv2d;module=layer1.0;aten=aten.convolution`."""
    parts = {"fw": framework_op, "module": module_path, "aten": aten_op}
    return ";".join(f"{k}={v}" for k, v in parts.items() if v)


def _decode_name(name: str) -> dict[str, str]:
    if "=" not in name:
        if "/" not in name:
            return {}  # a Python function's frame name (JAX names frames after functions)
        # JAX: the primitive's name stack, e.g. jit(f)/jit(block)/dot_general
        scope, _, primitive = name.rpartition("/")
        return {"framework_op": f"jax.{primitive}", "module_path": scope}
    fields = {}
    for part in name.split(";"):
        key, _, value = part.partition("=")
        if key in _KEYS and value:
            fields[_KEYS[key]] = value
    return fields


def _frames(loc: ir.Location, names: list[str]) -> list[SourceFrame]:
    """Frames innermost first; NameLoc names are collected into `names` on the way."""
    if isinstance(loc, ir.FileLineColLoc):
        return [SourceFrame(file=loc.filename, line=loc.start_line, col=loc.start_col)]
    if isinstance(loc, ir.CallSiteLoc):
        return _frames(loc.callee, names) + _frames(loc.caller, names)
    if isinstance(loc, ir.NameLoc):
        names.append(loc.name_str)
        return _frames(loc.child_loc, names)
    if isinstance(loc, ir.FusedLoc):
        frames: list[SourceFrame] = []
        for inner in loc.locations:
            frames.extend(_frames(inner, names))
        return frames
    return []


def _is_user_frame(frame: SourceFrame) -> bool:
    return not any(marker in frame.file for marker in _LIBRARY_MARKERS)


def provenance_of(op: ir.Operation) -> Provenance:
    loc = op.location
    names: list[str] = []
    stack = _frames(loc, names)
    fields: dict[str, str] = {}
    for name in names:
        for key, value in _decode_name(name).items():
            fields.setdefault(key, value)
    source = next((f for f in stack if _is_user_frame(f)), stack[0] if stack else None)
    return Provenance(stack=stack, source=source, location=str(loc), **fields)
