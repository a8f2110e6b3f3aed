"""The import graph of the project's packages: no cycles, the layout's direction, imports at the top.

Every module of opbyop/, flows/, tasks/ and storage/ is parsed (not imported) and each import of one
of the project's own modules becomes an edge, whether at the top of the module or inside a function:
a cycle hidden behind a function-level import is still a cycle. A function-level import is kept only
to defer a heavy optional dependency (jax, torch, prefect, dask, the plugin, jaxlib's MLIR ...), and
says so in a comment on its line, or on the line above a run of such imports.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each top-level folder and the name it installs as (pyproject.toml's package-dir)
PACKAGES = {"opbyop": "opbyop", "flows": "opbyop_flows", "tasks": "opbyop_tasks", "storage": "opbyop_storage"}
# The layout's direction (flows -> tasks -> opbyop <- storage): what each package must never import.
FORBIDDEN = {"opbyop": {"opbyop_flows", "opbyop_tasks", "opbyop_storage"},
             "opbyop_storage": {"opbyop_flows", "opbyop_tasks"}, "opbyop_tasks": {"opbyop_flows"}}
_PRAGMA = re.compile(r"noqa(:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the project module it imports
    line: int
    deferred: bool  # inside a function
    explained: bool  # a comment on its line, or above its run of imports, says why


def module_files(root: Path, packages: dict[str, str] | tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name (as imported) -> file, for every module of `packages` (folder -> import name)
    under `root`."""
    named = packages if isinstance(packages, dict) else {p: p for p in packages}
    found: dict[str, Path] = {}
    for folder, name in named.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [name, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` loads: itself, or the longest prefix that is one (a class or function
    imported from a module)."""
    parts = name.split(".")
    while parts:
        if (candidate := ".".join(parts)) in modules:
            return candidate
        parts.pop()
    return None


def _comments(source: str) -> dict[int, str]:
    """Line -> the comment's text without lint pragmas (noqa, type: ignore)."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = _PRAGMA.sub("", token.string.lstrip("#")).strip(" :()")
            if re.search(r"[A-Za-z]", text):
                found[token.start[0]] = text
    return found


def _names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parent + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def module_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Each import of a project module in `module`, with whether it is deferred and explained."""
    source = path.read_text()
    comments = _comments(source)
    lines = source.splitlines()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def commented(node: ast.stmt) -> bool:
        return any(line in comments for line in range(node.lineno, node.end_lineno + 1))

    def comment_above(node: ast.stmt) -> bool:
        above = node.lineno - 2
        return above >= 0 and lines[above].strip().startswith("#") and (above + 1) in comments

    def visit_body(body: list[ast.stmt], in_function: bool) -> None:
        run_explained = False  # a run of consecutive imports shares the comment of its first
        for statement in body:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                explained = commented(statement) or comment_above(statement) or run_explained
                run_explained = explained
                targets = {t for name in _names(statement, package) if (t := _resolve(name, modules))}
                found.extend(Import(module, target, statement.lineno, in_function, explained)
                             for target in sorted(targets - {module}))
                continue
            run_explained = False
            visit(statement, in_function)

    def visit(node: ast.AST, in_function: bool) -> None:
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return  # never executed: for type checkers only
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                visit_body(value, inside)
            elif isinstance(value, list):
                for child in value:
                    visit(child, inside)

    visit(ast.parse(source), False)
    return found


@cache
def project_imports(root: Path = ROOT) -> tuple[Import, ...]:
    modules = module_files(root)
    return tuple(i for module, path in modules.items() for i in module_imports(module, path, modules))


def cycles(imports: tuple[Import, ...] | list[Import]) -> list[list[str]]:
    """One cycle (as a path a -> ... -> a) through each strongly connected group of modules."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        graph.setdefault(i.module, set()).add(i.target)
    found: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(graph):
        path: list[str] = []
        on_path: set[str] = set()

        def walk(node: str) -> list[str] | None:
            if node in on_path:
                return path[path.index(node):] + [node]
            if node in done:
                return None
            path.append(node)
            on_path.add(node)
            for nxt in sorted(graph.get(node, ())):
                if (cycle := walk(nxt)) is not None:
                    return cycle
            path.pop()
            on_path.discard(node)
            done.add(node)
            return None

        if (cycle := walk(start)) is not None:
            found.append(cycle)
            done.update(cycle)
    return found


def test_the_checker_finds_a_cycle_hidden_behind_a_function_level_import(tmp_path: Path) -> None:
    (tmp_path / "opbyop").mkdir()
    (tmp_path / "opbyop" / "__init__.py").write_text("")
    (tmp_path / "opbyop" / "a.py").write_text("from opbyop.b import g\n")
    (tmp_path / "opbyop" / "b.py").write_text("def g():\n    from opbyop.a import f\n")
    modules = module_files(tmp_path, ("opbyop",))
    imports = [i for m, p in modules.items() for i in module_imports(m, p, modules)]
    assert cycles(imports) == [["opbyop.a", "opbyop.b", "opbyop.a"]]
    assert [(i.module, i.deferred, i.explained) for i in imports] == [("opbyop.a", False, False),
                                                                      ("opbyop.b", True, False)]


def test_the_checker_takes_a_comment_on_the_line_or_above_a_run_of_imports_but_not_a_bare_noqa(tmp_path: Path) -> None:
    (tmp_path / "opbyop").mkdir()
    (tmp_path / "opbyop" / "__init__.py").write_text("")
    (tmp_path / "opbyop" / "x.py").write_text("")
    (tmp_path / "opbyop" / "y.py").write_text(
        "def f():\n"
        "    from opbyop import x  # torch: loaded only when used\n"
        "def g():\n"
        "    # jax must be configured first\n"
        "    from opbyop import x\n"
        "    from opbyop.x import z\n"
        "def h():\n"
        "    from opbyop import x  # noqa: F401\n")
    modules = module_files(tmp_path, ("opbyop",))
    imports = module_imports("opbyop.y", modules["opbyop.y"], modules)
    assert [(i.line, i.explained) for i in imports] == [(2, True), (5, True), (6, True), (8, False)]


def test_the_project_s_modules_import_each_other_without_a_cycle() -> None:
    assert cycles(project_imports()) == [], "move what both sides need to a module both can import"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_each_package_imports_only_in_the_layout_s_direction(package: str) -> None:
    wrong = [f"{i.module}:{i.line} imports {i.target}" for i in project_imports()
             if i.module.split(".")[0] == package and i.target.split(".")[0] in FORBIDDEN[package]]
    assert wrong == []


def test_a_function_level_import_of_the_project_says_why_it_is_deferred() -> None:
    unexplained = [f"{i.module}:{i.line} imports {i.target}" for i in project_imports() if i.deferred and not i.explained]
    assert unexplained == [], ("import these at the top of the module; defer only a heavy optional dependency "
                               "(jax, torch, prefect, dask, the plugin), with a comment saying so")


def room(module: str) -> str:
    """The room a module lives in, as the layout draws it: one of opbyop's subpackages or top-level
    modules, or one of the other top-level packages whole."""
    parts = module.split(".")
    if parts[0] != "opbyop" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def test_no_import_runs_back_up_the_floors() -> None:
    """Between rooms (opbyop's subpackages and top-level modules, flows, tasks, storage) the imports
    go one way: a fact that two floors share lives on the floor below both (opbyop/boards.py,
    opbyop/stage_call.py, opbyop/op_memory.py, opbyop/graph.py, opbyop/dtypes.py ...)."""
    edges = [Import(room(i.module), room(i.target), i.line, i.deferred, i.explained) for i in project_imports()
             if room(i.module) != room(i.target)]
    assert cycles(edges) == [], "an import runs back up: move what the lower room needs down to a room below both"


def test_every_package_is_installed_under_its_own_name() -> None:
    """pyproject.toml lists the packages it installs: a folder of modules left out of it would import
    from a checkout and fail from an installed wheel."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    installed = set(project["packages"])
    folders = {".".join([PACKAGES[path.parent.relative_to(ROOT).parts[0]],
                         *path.parent.relative_to(ROOT).parts[1:]])
               for folder in PACKAGES for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
    assert folders - installed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert {name: folder for folder, name in PACKAGES.items() if name != folder} == project["package-dir"]
