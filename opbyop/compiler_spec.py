"""How a user names the compiler build under test (opbyop.compiler.builds prepares what it names)."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from opbyop.errors import CompilerError

INSTALLED = "installed"
NEWEST = "newest"
DEFAULT_PACKAGE = "jax-tt-plugin"
SPEC_FORMS = (f"{INSTALLED} (the plugin installed beside opbyop), {NEWEST} (the registry's newest {DEFAULT_PACKAGE}), "
              "NAME==VERSION (a release on the package registry), a .whl file, a PJRT plugin library (.so) or the "
              "package directory holding one; add ',jax==X' to drive a build made for another jaxlib")


class SpecKind(str, Enum):
    INSTALLED = "installed"
    RELEASE = "release"  # NAME==VERSION on the package registry
    NEWEST = "newest"  # the registry's newest release of a package
    WHEEL = "wheel"
    LIBRARY = "library"  # a PJRT plugin shared library
    PACKAGE = "package"  # a directory holding one


class CompilerSpec(BaseModel):
    """What a user names a compiler with, parsed."""

    model_config = ConfigDict(frozen=True)

    text: str
    kind: SpecKind
    target: str = ""  # a package name (release, newest) or a path (wheel, library, package)
    version: str = ""  # a release's version
    jax: str | None = None  # the jax the user says drives it (its own environment)

    @classmethod
    def parse(cls, text: str | None) -> CompilerSpec:
        """`installed`, `newest`, `NAME==VERSION`, a wheel, a library or a package directory, each
        optionally followed by `,jax==X` (the jax the build was made for)."""
        text = (text or INSTALLED).strip()
        main, *extras = [part.strip() for part in text.split(",")]
        jax = None
        for extra in extras:
            name, _, version = extra.partition("==")
            if name.strip() != "jax" or not version.strip():
                raise CompilerError(f"{extra!r} in compiler {text!r} is not 'jax==VERSION'", f"write it as {main},jax==0.7.1")
            jax = version.strip()
        kind, target, version = _kind_of(main, text)
        if kind is SpecKind.INSTALLED and jax:
            raise CompilerError(f"compiler {text!r}: the installed plugin runs with opbyop's own jax",
                                "name a release, a wheel or a library to drive it with another jax")
        return cls(text=text, kind=kind, target=target, version=version, jax=jax)


def _kind_of(main: str, text: str) -> tuple[SpecKind, str, str]:
    if main in ("", INSTALLED):
        return SpecKind.INSTALLED, "", ""
    if main == NEWEST or main.startswith(f"{NEWEST}:"):
        return SpecKind.NEWEST, main.partition(":")[2] or DEFAULT_PACKAGE, ""
    path = Path(main).expanduser()
    if "==" in main and not path.exists():
        name, _, version = main.partition("==")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) or not version.strip():
            raise CompilerError(f"compiler {text!r} is not NAME==VERSION", f"write a release as {DEFAULT_PACKAGE}==0.1.2")
        return SpecKind.RELEASE, name.strip(), version.strip()
    if path.suffix == ".whl":
        if not path.is_file():
            raise CompilerError(f"no wheel file at {path}", "check the path")
        return SpecKind.WHEEL, str(path.resolve()), ""
    if path.is_dir():
        return SpecKind.PACKAGE, str(path.resolve()), ""
    if path.is_file():
        return SpecKind.LIBRARY, str(path.resolve()), ""
    raise CompilerError(f"compiler {text!r} is neither a release, a wheel, a library nor a directory "
                        f"(no file at {path})", f"give one of: {SPEC_FORMS}")


def check_spec(text: str) -> str:
    """`text` when it names a build (a configuration field's validator). Its CompilerError passes
    through pydantic as it is (pydantic wraps only a ValueError or an AssertionError in its
    "Value error," framing and link): the user reads opbyop's problem and fix alone."""
    CompilerSpec.parse(text)
    return text
