"""The upstream values a model's ops were given (golden.upstream.attach), kept by what they are
computed from: the model's split (ir.split_cache.split_key), its real argument values (inputs and
buffers), how its records name its arguments, the code that computes them and the jaxlib that runs
XLA:CPU. A second night replays no upstream op it replayed before. Kept beside the artifacts the
values are stored in (the workspace's), one JSON file per model; an op whose artifacts are gone, or
a file that cannot be read, is computed again."""

from __future__ import annotations

import json
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Callable, Mapping

import opbyop
from opbyop.artifacts import ArtifactStore
from opbyop.atomic import write_text
from opbyop.digests import arrays_digest, source_digest, text_digest
from opbyop.golden.upstream import attach
from opbyop.golden.xla_cpu import XlaCpu
from opbyop.graph import ModelGraph
from opbyop.ir.split import SplitResult
from opbyop.ir.split_cache import split_key
from opbyop.records import UniqueOp

FOLDER = "upstream"


@cache  # once per process: the code it runs is the code it loaded
def values_code() -> str:
    return text_digest(source_digest(Path(opbyop.__file__).parent / "golden"), version("jaxlib"))


def values_key(graph: ModelGraph, real: Mapping[int, object], names: Mapping[int, str]) -> str:
    indices = sorted(real)
    return text_digest(split_key(graph), repr(indices), arrays_digest(real[i] for i in indices),
                       json.dumps(sorted(names.items())), values_code())[:40]


def attach_kept(new: list[UniqueOp], name: str, split: SplitResult, graph: ModelGraph, artifacts: ArtifactStore,
                names: Mapping[int, str], golden: Callable[[], XlaCpu] = XlaCpu, reuse: bool = True
                ) -> dict[str, dict[int, str]]:
    """attach() for model `name`'s new ops, taking what was kept for the same model and computing
    only the rest (all of them without `reuse`); returns attach's {model: {position: XLA's message}}."""
    real = graph.real_values()
    path = artifacts.root / FOLDER / f"{values_key(graph, real, names)}.json"
    kept_ops, kept_failed = _read(path) if reuse else ({}, {})
    todo = []
    for op in new:
        got = kept_ops.get(op.signature)
        if got is not None and _present(got[0].values(), artifacts):
            op.input_values, op.synthetic_reasons = dict(got[0]), dict(got[1])
        else:
            todo.append(op)
    failed = dict(kept_failed)
    if todo:
        computed = attach(todo, {name: split}, golden, artifacts, real_arguments={name: real},
                          argument_names={name: names})
        failed.update(computed.get(name, {}))
        kept_ops.update({op.signature: (op.input_values, op.synthetic_reasons) for op in todo})
        _write(path, kept_ops, failed)
    return {name: failed} if failed else {}


def _present(digests, artifacts: ArtifactStore) -> bool:
    try:
        for digest in digests:
            artifacts.path(digest)
    except FileNotFoundError:
        return False
    return True


def _read(path: Path) -> tuple[dict[str, tuple[dict[int, str], dict[int, str]]], dict[int, str]]:
    try:
        data = json.loads(path.read_text())
        ops = {s: ({int(k): v for k, v in values.items()}, {int(k): v for k, v in reasons.items()})
               for s, (values, reasons) in data["ops"].items()}
        return ops, {int(k): v for k, v in data["failed"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, {}


def _write(path: Path, ops: dict, failed: dict[int, str]) -> None:
    try:
        write_text(path, json.dumps({"ops": ops, "failed": failed}))
    except OSError:  # a full disk costs only what is kept
        pass
