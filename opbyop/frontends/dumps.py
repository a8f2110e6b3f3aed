"""Folders of IR dumps that a frontend's nightly leaves behind: one model per dumped module.

The TT PJRT plugin (and tt-xla's --dump-irs, the same plugin) writes, for every compile into its
export_path, one file per stage it reached, each named `<stage>_<millisecond timestamp>.mlir`
(newer builds may put a name between the stage and the stamp):

    irs/vhlo_*.mlir, irs/shlo_*.mlir, irs/shlo_frontend_*.mlir, irs/shlo_compiler_*.mlir,
    irs/shlo_set_mesh_attr_*.mlir, irs/shlo_compiler_cleaned_*.mlir, irs/ttir_*.mlir,
    irs/ttnn_*.mlir, irs/ttnn_runtime_*.mlir, fb_*.ttnn

The stamps differ from stage to stage, so the files of one compile are told apart from the next
one's by their order: stages are written in pipeline order, and a stage that is not later than the
previous file's starts a new module. Of each module the most frontend-like stage is read:
`shlo` (StableHLO as the plugin received it, with the frontend's locations: the text jaxlib parses),
else `vhlo` (the portable artifact, deserialised by jaxlib's stablehlo bindings), else the
compiler's own StableHLO stages. A module dumped only from TTIR on cannot be analysed here: the
plugin parses only StableHLO/VHLO (it refuses TTIR text: 'Failed to parse using StableHLO') and
nothing else installed compiles TTIR, so such a module is recorded as not supported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from opbyop.errors import ModuleError, OpbyopError
from opbyop.ir.context import make_context
from opbyop.ir.parse import check_nesting
from opbyop.frontends.specs import SPEC_SEPARATOR

# Dump stages in the order the plugin writes them (file prefixes; longest match wins).
STAGE_ORDER = ("vhlo", "shlo", "shlo_frontend", "shlo_compiler", "shlo_set_mesh_attr", "shlo_compiler_cleaned",
               "ttir", "ttnn", "ttnn_runtime", "fb")
# The stages opbyop reads a module from, most frontend-like first. shlo_frontend, shlo_compiler and
# shlo_set_mesh_attr carry tt attributes jaxlib does not know: they come last.
READ_ORDER = ("shlo", "vhlo", "shlo_compiler_cleaned", "shlo_frontend", "shlo_set_mesh_attr", "shlo_compiler")
STABLEHLO_STAGES = frozenset(READ_ORDER)
_RANK = {stage: i for i, stage in enumerate(STAGE_ORDER)}
_BY_LENGTH = sorted(STAGE_ORDER, key=len, reverse=True)
_STAMP = re.compile(r"_(\d{10,})$")

NOT_SUPPORTED = "not supported"


class DumpError(OpbyopError):
    """A dumped module that cannot be analysed (unreadable, or only TTIR/TTNN stages)."""


@dataclass(frozen=True)
class DumpFile:
    path: Path
    stage: str
    stamp: int  # milliseconds, from the name (else the file's mtime)

    @property
    def rank(self) -> int:
        return _RANK[self.stage]


@dataclass
class DumpedModule:
    """One compile's dumps: the files of every stage it reached."""

    name: str
    folder: Path  # the export folder (the one holding irs/)
    files: dict[str, Path] = field(default_factory=dict)  # stage -> file

    @property
    def chosen(self) -> tuple[str, Path]:
        """(stage, file) to read: the most frontend-like stage dumped; a TTIR or TTNN stage when
        nothing earlier was (recorded as not supported when read)."""
        for stage in READ_ORDER + tuple(s for s in STAGE_ORDER if s not in STABLEHLO_STAGES):
            if stage in self.files:
                return stage, self.files[stage]
        raise AssertionError("a dumped module has at least one file")

    @property
    def spec(self) -> str:
        """The model spec that loads this module under its name (frontends.loader.load_model)."""
        return f"{self.chosen[1]}{SPEC_SEPARATOR}{self.name}"


def stage_of(path: Path) -> tuple[str, int] | None:
    """(stage, stamp) of a plugin dump file name, None for any other file."""
    suffix = ".ttnn" if path.name.startswith("fb_") else ".mlir"
    if not path.name.endswith(suffix):
        return None
    stem = path.name[: -len(suffix)]
    m = _STAMP.search(stem)
    if m is None:
        return None
    head = stem[: m.start()]  # `<stage>` or `<stage>_<name>`
    for stage in _BY_LENGTH:
        if head == stage or head.startswith(stage + "_"):
            if (stage == "fb") != (suffix == ".ttnn"):
                return None
            return stage, int(m.group(1))
    return None


def _dump_files(folder: Path) -> list[DumpFile]:
    """The plugin's dump files of one export folder (irs/*.mlir and fb_*.ttnn), in writing order."""
    found = []
    candidates = list((folder / "irs").glob("*.mlir")) if (folder / "irs").is_dir() else []
    candidates += [p for p in folder.glob("fb_*.ttnn")]
    for path in candidates:
        known = stage_of(path)
        if known is not None and path.is_file():
            found.append(DumpFile(path, known[0], known[1]))
    return sorted(found, key=lambda f: (f.stamp, f.rank))


def group_modules(files: list[DumpFile]) -> list[dict[str, Path]]:
    """Files in writing order -> one {stage: file} per compile: a stage not later than the previous
    file's starts the next compile."""
    modules: list[dict[str, Path]] = []
    previous = None
    for f in files:
        if previous is None or f.rank <= previous.rank:
            modules.append({})
        modules[-1][f.stage] = f.path
        previous = f
    return modules


def export_folders(root: Path) -> list[Path]:
    """Every folder under `root` (itself included) that holds plugin dumps, sorted."""
    root = Path(root)
    folders = {p.parent.parent for p in root.rglob("irs/*.mlir") if stage_of(p) is not None}
    folders |= {p.parent for p in root.rglob("fb_*.ttnn") if stage_of(p) is not None}
    return sorted(folders)


def model_name(root: Path, folder: Path) -> str:
    """A model name from the export folder's path below `root` ('vision/resnet50' -> 'vision.resnet50';
    the root itself -> its own name): stable from night to night, no slash (names become file names)."""
    parts = folder.relative_to(root).parts or (root.resolve().name,)
    name = ".".join(re.sub(r"[^A-Za-z0-9_.-]", "_", p) for p in parts).strip(".")
    return name or "dump"


def scan(root: Path) -> list[DumpedModule]:
    """Every dumped module under `root`, recursively: one per compile, named from its folder
    (`folder` alone, `folder.1`, `folder.2` ... when a folder holds several compiles)."""
    root = Path(root)
    modules: list[DumpedModule] = []
    for folder in export_folders(root):
        groups = group_modules(_dump_files(folder))
        base = model_name(root, folder)
        for i, files in enumerate(groups, start=1):
            name = base if len(groups) == 1 else f"{base}.{i}"
            modules.append(DumpedModule(name=name, folder=folder, files=files))
    return modules


def is_dump_tree(path: Path) -> bool:
    return Path(path).is_dir() and bool(export_folders(Path(path)))


def expand(spec: str) -> list[str] | None:
    """A directory of dumps -> one spec per dumped module; None for anything else."""
    path = Path(spec)
    if not path.is_dir():
        return None
    modules = scan(path)
    return [m.spec for m in modules] or None


def read_dump(path: Path) -> tuple[str, str]:
    """(stage, StableHLO text) of one dump file; DumpError when it cannot be analysed."""
    known = stage_of(path)
    stage = known[0] if known is not None else "shlo"
    if stage not in STABLEHLO_STAGES:
        raise DumpError(
            f"{NOT_SUPPORTED}: {path} is a {stage.upper()} dump and the module has no StableHLO or VHLO stage: "
            f"the TT plugin compiles only StableHLO/VHLO (it refuses TTIR text) and nothing installed here "
            f"compiles {stage.upper()}",
            "dump the frontend's StableHLO too (the plugin's export_path writes irs/shlo_*.mlir), or analyse "
            "the model from its framework")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DumpError(f"cannot read {path}: {e}", "check the file (a dump cut short, or not text)") from None
    check_nesting(text, str(path))
    if stage == "vhlo":
        text = vhlo_to_stablehlo(text, str(path))
    return stage, text


def vhlo_to_stablehlo(text: str, where: str) -> str:
    """A VHLO portable artifact (text) as StableHLO text, locations kept."""
    from jaxlib.mlir.dialects import stablehlo

    with make_context() as ctx:
        try:
            module = stablehlo.deserialize_portable_artifact(ctx, text)
        except Exception as e:
            raise ModuleError(f"{where} is not a VHLO module jaxlib can deserialise: {e}",
                              "pass the StableHLO dump (irs/shlo_*.mlir) of the same compile instead") from None
        return module.operation.get_asm(enable_debug_info=True)
