"""The `opbyop` Typer application and what every command shares: consoles that print data literally,
errors (problem, then fix), option checks, input specs, status styles."""

from __future__ import annotations

import math
import re
from enum import Enum
from typing import Iterable, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from opbyop.config import InputSpec
from opbyop.errors import OpbyopError
from opbyop.records import Status

app = typer.Typer(help="Op-by-op bring-up analysis for tt-mlir targets.", no_args_is_help=True,
                  pretty_exceptions_enable=False)

# A pipe gets whole lines: tables are laid out for this width instead of 80 columns.
PIPE_WIDTH = 10_000
# Control characters in data (a terminal escape sequence in a stored message ...) are shown, not obeyed.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with control characters (but newline and tab) written as \\xNN escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class LiteralConsole(Console):
    """Prints data literally: no markup, no :emoji: codes, no highlighting, control characters
    escaped (styles come from Text objects)."""

    def render_str(self, text: str, **kwargs: object) -> Text:  # type: ignore[override]
        return super().render_str(visible(text), **kwargs)  # type: ignore[arg-type]


def make_console(stderr: bool = False) -> Console:
    """A LiteralConsole; when it is not a terminal, lines are never cut to 80 columns."""
    width = None if Console(stderr=stderr).is_terminal else PIPE_WIDTH
    return LiteralConsole(stderr=stderr, markup=False, emoji=False, highlight=False, width=width)


console = make_console()
err_console = make_console(stderr=True)

def status_text(status: Status | str, text: str | None = None) -> Text:
    """`status` (or `text`) in its status's style (records.StatusFacts); an unknown status value prints plain."""
    try:
        style = Status(status).style
    except ValueError:
        style = ""
    value = status.value if isinstance(status, Status) else str(status)
    return Text(text if text is not None else value, style=style)


def styled(*parts: str | tuple[str, str] | Text) -> Text:
    """Text from plain strings (printed literally) and (text, style) pairs."""
    return Text.assemble(*(visible(p) if isinstance(p, str) else (visible(p[0]), p[1]) if isinstance(p, tuple)
                           else p for p in parts))


def print_error(error: Exception | str) -> None:
    """`error: <problem>` and `  fix: <fix>` on stderr, literally."""
    if isinstance(error, OpbyopError):
        err_console.print(styled(("error: ", "red"), error.problem))
        if error.fix:
            err_console.print(styled(("  fix: ", "dim"), error.fix))
    else:
        err_console.print(styled(("error: ", "red"), str(error)))


def fail(error: Exception | str, code: int = 2) -> NoReturn:
    """Print a user-facing error (problem, then fix) and exit `code` (2: bad input)."""
    print_error(error)
    raise typer.Exit(code)


def cut(text: str | None, width: int, full: bool) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis unless `full`."""
    text = " ".join((text or "").split()) if not full else (text or "")
    return text if full or len(text) <= width else text[: width - 1] + "…"


def full_by_default() -> bool:
    """Messages are whole when stdout is not a terminal (a pipe or a file reads them all)."""
    return not console.is_terminal


# -- option checks: rejected by the CLI itself, naming the allowed values ----------------------
class DeviceBackend(str, Enum):
    """Whose device run gives the verdict (opbyop.config.DeviceOptions.backend)."""

    model = "model"
    ttsim = "ttsim"


DeviceOption = typer.Option(DeviceBackend.model, "--device", help="model: opbyop's model of the chip (fast); ttsim: "
                            "tt-metal's kernels on Tenstorrent's simulator, beside the model (`make ttsim` sets it up)")


class MathFidelity(str, Enum):
    lofi = "lofi"
    hifi2 = "hifi2"
    hifi3 = "hifi3"
    hifi4 = "hifi4"


def positive_seconds(value: float | None) -> float | None:
    """Typer callback: a finite number of seconds above 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a time limit: give a finite number of seconds above 0, e.g. 120")
    return value


def positive_count(value: int | None) -> int | None:
    """Typer callback: a count of at least 1."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"{value} is not allowed: give 1 or more")
    return value


# -- input specs -------------------------------------------------------------------------------
SPEC_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "i64": "int64",
               "i32": "int32", "i1": "bool"}
MAX_SPEC_ELEMENTS = 1 << 30  # one example input; larger is a typo, not a model
_SPEC = re.compile(r"^(?P<dims>(?:[0-9]{1,12}x)*)(?P<dtype>[a-z0-9]+)(?::(?P<high>[0-9]{1,18}))?$")
_SPEC_FIX = "write it like 1x3x224x224xf32, or 1x32xi64:1000 for integers in [0, 1000); dtypes: " + \
            ", ".join(SPEC_DTYPES)


def parse_input_spec(text: str):
    """`1x3x224x224xf32` / `1x32xi64:1000` -> InputSpec; anything else raises OpbyopError."""
    match = _SPEC.match(text.strip())
    if match is None or match["dtype"] not in SPEC_DTYPES:
        raise OpbyopError(f"cannot read input spec {text!r}", _SPEC_FIX)
    shape = [int(d) for d in match["dims"].split("x") if d]
    dtype = SPEC_DTYPES[match["dtype"]]
    if math.prod(shape) > MAX_SPEC_ELEMENTS:
        raise OpbyopError(f"input spec {text!r} asks for {math.prod(shape):,} elements, over the "
                          f"{MAX_SPEC_ELEMENTS:,} limit of one example input", "check the shape")
    high = match["high"]
    if high is not None and not dtype.startswith("int"):
        raise OpbyopError(f"input spec {text!r}: a bound after ':' applies to integer inputs only", _SPEC_FIX)
    if high is not None and int(high) < 1:
        raise OpbyopError(f"input spec {text!r}: the bound after ':' must be 1 or more", _SPEC_FIX)
    return InputSpec(shape=shape, dtype=dtype, high=int(high) if high is not None else 2)


def input_specs(inputs: Iterable[str]) -> list:
    return [parse_input_spec(text) for text in inputs]
