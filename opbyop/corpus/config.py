"""configs/corpus.yaml: the corpus as a nightly target."""

from __future__ import annotations

from pathlib import Path

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from opbyop.boards import mesh_boards
from opbyop.compiler_spec import check_spec
from opbyop.config import CompilerOptions, config_dir, load_config


class CorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chips: list[str] = Field(default_factory=lambda: ["n150", "p150"], min_length=1)
    ops: list[str] = Field(default_factory=list, description="catalog builders; empty: all")
    dtypes: list[str] = Field(default_factory=list, description="element types; empty: all")
    forms: list[str] = Field(default_factory=list, description="args | const; empty: both")
    op_timeout_s: float = Field(120.0, gt=0)
    meshes: list[str] = Field(default_factory=list, description=f"boards ({', '.join(mesh_boards())}; "
                              "NAME:ROWSxCOLS for one shape) running the multichip cases; empty: none")
    compiler: CompilerOptions = Field(default_factory=CompilerOptions)
    compiler_build: Annotated[str, AfterValidator(check_spec)] = Field("installed", description="the compiler build under test "
                                "(opbyop.compiler.builds: installed, newest, NAME==VERSION, a wheel or a library)")


def load_corpus_config(path: Path | None = None) -> CorpusConfig:
    return load_config(CorpusConfig, path or config_dir() / "corpus.yaml", "corpus configuration")
