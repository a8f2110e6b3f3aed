"""Parse StableHLO text or bytecode into a module, with errors that point at line and column.

MLIR's parser recurses once per nesting level (regions, types, attributes): a few thousand nested
`module {` overflow the stack and kill the process (SIGSEGV, no message). So text is measured with
a cheap lexical nesting check first, and bytecode (which cannot be measured without parsing it) is
read into text in a child process whose death is reported as an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from jaxlib.mlir import ir

from opbyop.errors import ModuleError
from opbyop.ir.context import make_context

# Real modules nest a few levels (the zoo's: at most 7); MLIR's parser dies at about 5,000 nested regions.
MAX_NESTING = 1_000
# Strings and comments may hold any bracket: they are blanked before counting.
_STRINGS_AND_COMMENTS = re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*')
_DELTA = np.zeros(256, np.int8)  # +1 opens, -1 closes
_DELTA[list(b"(<[{")] = 1
_DELTA[list(b")>]}")] = -1
_CHUNK = 1 << 24


def nesting_depth(text: str | bytes) -> tuple[int, int]:
    """(deepest bracket nesting, the line where it is reached) of MLIR text, outside strings and
    comments; `->` is an arrow, not a closing bracket. Linear time, vectorised."""
    data = text.encode() if isinstance(text, str) else text
    data = _STRINGS_AND_COMMENTS.sub(b'""', data)
    deepest, where, depth = 0, 0, 0
    arrows = [m.start() + 1 for m in re.finditer(rb"->", data)]  # the '>' of each '->' closes nothing
    for start in range(0, len(data), _CHUNK):
        chunk = np.frombuffer(data, np.uint8, count=min(_CHUNK, len(data) - start), offset=start)
        delta = _DELTA[chunk]
        delta[[a - start for a in arrows if start <= a < start + len(chunk)]] = 0
        levels = np.cumsum(delta, dtype=np.int32)
        i = int(np.argmax(levels))
        if levels[i] + depth > deepest:
            deepest, where = int(levels[i]) + depth, start + i
        depth += int(levels[-1])
    return deepest, data.count(b"\n", 0, where) + 1  # blanking kept every newline


def check_nesting(text: str | bytes, name: str = "<module>") -> None:
    """Refuse text nested deeper than MAX_NESTING before MLIR's parser sees (and dies of) it."""
    depth, line = nesting_depth(text)
    if depth > MAX_NESTING:
        raise ModuleError(
            f"{name} nests brackets or regions {depth:,} levels deep (line {line}); opbyop refuses more than "
            f"{MAX_NESTING:,}: MLIR's parser would overflow its stack and kill the process",
            "pass a module as the frameworks export it (real models nest a few dozen levels); "
            "if this one is real, flatten its nested modules, tuples or regions")


def parse_module(source: str | bytes, ctx: ir.Context, name: str = "<module>") -> ir.Module:
    """Parse MLIR text or bytecode; a malformed module raises ModuleError naming line and column.
    Bytecode is first turned into text in a child process (see bytecode_to_text)."""
    if isinstance(source, bytes):
        source = bytecode_to_text(source, name) if source[:4] == BYTECODE_MAGIC else _decode(source, name)
    check_nesting(source, name)
    return _parse(source, ctx, name)


def _parse(source: str | bytes, ctx: ir.Context, name: str) -> ir.Module:
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


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModuleError(f"{name} is neither MLIR text (UTF-8) nor MLIR bytecode",
                          "pass a .mlir text file or a .mlirbc bytecode file") from None


BYTECODE_MAGIC = b"ML\xefR"


def read_module_source(path: Path) -> str | bytes:
    """Read a .mlir (text) or .mlirbc (bytecode) file."""
    path = Path(path)
    if path.is_dir():
        raise ModuleError(f"{path} is a directory, not a module file", "pass a .mlir (text) or .mlirbc (bytecode) file")
    if not path.exists():
        raise ModuleError(f"no such file: {path}", "check the path")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModuleError(f"cannot read {path}: {e.strerror or e}", "check the file's permissions") from None
    return data if data[:4] == BYTECODE_MAGIC else _decode(data, str(path))


def bytecode_to_text(data: bytes, name: str, timeout: float = 600.0) -> str:
    """MLIR bytecode -> text (with locations), parsed in a child process: a module that kills the
    parser kills the child, and that is reported as an error instead of taking this process down."""
    try:
        proc = subprocess.run([sys.executable, "-m", "opbyop.ir.parse", name], input=data, capture_output=True,
                              timeout=timeout, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    except subprocess.TimeoutExpired:
        raise ModuleError(f"{name}: reading its bytecode took more than {timeout:.0f} s",
                          "pass the module as text (.mlir), or check that it is a real StableHLO module") from None
    if proc.returncode == 0:
        return proc.stdout.decode()
    if proc.returncode == 2:  # a ModuleError, printed by the child
        problem, _, fix = proc.stderr.decode(errors="replace").partition("\n  fix: ")
        raise ModuleError(problem.strip(), fix.strip() or None)
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    raise ModuleError(f"{name}: MLIR's parser died reading its bytecode ({how}), e.g. on a module nested too deep",
                      "pass a module as the frameworks export it, or as text (.mlir) for a message that "
                      "points at the problem")


def _line_col(loc: ir.Location) -> str:
    text = str(loc)  # loc("-":3:28)
    if text.startswith('loc("-":'):
        line, col = text[len('loc("-":') : -1].split(":")[:2]
        return f"line {line}, column {col}"
    return text


def _bytecode_child(name: str) -> int:
    """`python -m opbyop.ir.parse NAME`: bytecode on stdin -> text on stdout (exit 2 with the error)."""
    data = sys.stdin.buffer.read()
    try:
        with make_context() as ctx:
            text = _parse(data, ctx, name).operation.get_asm(enable_debug_info=True)
        check_nesting(text, name)
    except ModuleError as e:
        sys.stderr.write(str(e))
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(_bytecode_child(sys.argv[1]))
