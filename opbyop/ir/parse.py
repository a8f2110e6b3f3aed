"""Parse StableHLO text or bytecode into a module, with errors that point at line and column."""

from __future__ import annotations

from pathlib import Path

from jaxlib.mlir import ir

from opbyop.errors import ModuleError


def parse_module(source: str | bytes, ctx: ir.Context, name: str = "<module>") -> ir.Module:
    """Parse MLIR text or bytecode; a malformed module raises ModuleError naming line and column."""
    try:
        module = ir.Module.parse(source, ctx)
    except ir.MLIRError as e:
        where = "; ".join(f"{_line_col(d.location)}: {d.message}" for d in e.error_diagnostics)
        raise ModuleError(
            f"{name} is not valid MLIR: {where or e}",
            "fix the module text at that line and column (mlir-opt / stablehlo-opt print the same "
            "diagnostic), or re-export it from the framework",
        ) from None
    if not module.operation.verify():
        raise ModuleError(f"{name} does not verify", "run stablehlo-opt --verify-each on it")
    return module


def read_module_source(path: Path) -> str | bytes:
    """Read a .mlir (text) or .mlirbc (bytecode) file."""
    if not path.exists():
        raise ModuleError(f"no such file: {path}", "check the path")
    data = path.read_bytes()
    if data[:4] == b"ML\xefR":  # MLIR bytecode magic
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModuleError(
            f"{path} is neither MLIR text (UTF-8) nor MLIR bytecode",
            "pass a .mlir text file or a .mlirbc bytecode file",
        ) from None


def _line_col(loc: ir.Location) -> str:
    text = str(loc)  # loc("-":3:28)
    if text.startswith('loc("-":'):
        line, col = text[len('loc("-":') : -1].split(":")[:2]
        return f"line {line}, column {col}"
    return text
