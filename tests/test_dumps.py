"""Folders of IR dumps as a frontend's nightly leaves them: built here with the plugin's own dumps.

The zoo's mlp and jax-mlp are compiled whole by the real plugin (TTCompiler in a child process: this
test process only has XLA:CPU) into export folders; the tree then gets what real nightlies also
hold: a folder with two compiles, a module dumped only as VHLO, one only from TTIR on, one whose
StableHLO file is cut short.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opbyop.frontends import dumps
from opbyop.frontends.specs import split_spec

COMPILE_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from opbyop.jaxenv import prepare_jax
    prepare_jax(Path(sys.argv[1]))
    from opbyop.compiler.plugin import TTCompiler
    from opbyop.config import CompilerOptions
    compiler = TTCompiler()
    for text_path, export in json.loads(sys.argv[2]):
        outcome = compiler.compile(Path(text_path).read_text(), CompilerOptions(), Path(export))
        assert outcome.ok, outcome.message
""")


def plugin_dumps(desc_path: Path, modules: dict[str, str], root: Path) -> dict[str, Path]:
    """Each module text compiled whole by the plugin into root/<name> (its export_path)."""
    from opbyop.compiler.assets import private_tmpdir, startup_lock
    from opbyop.compiler.builds import installed, unpack_assets

    jobs = []
    for name, text in modules.items():
        source = root / f"{name}.source.mlir"
        source.write_text(text)
        jobs.append((str(source), str(root / name)))
    with startup_lock():  # one plugin start at a time per machine, as the workers do
        tmp = private_tmpdir(root / "tmp", unpack_assets(installed()))
        env = {**os.environ, "TMPDIR": str(tmp)}
        env.pop("JAX_PLATFORMS", None)
        proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT, str(desc_path), json.dumps(jobs)], env=env,
                              cwd=tmp, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shutil.rmtree(tmp, ignore_errors=True)
    return {name: root / name for name in modules}


@pytest.fixture(scope="module")
def exports(p150, tmp_path_factory):
    """The plugin's export folders for mlp, jax-mlp, and jax-mlp compiled a second time."""
    from opbyop.frontends.loader import load_model
    from opbyop.ir.rewrite import rewritten_text

    texts = {name: rewritten_text(load_model(name).module_text, name) for name in ("mlp", "jax-mlp")}
    texts["jax-mlp-again"] = texts["jax-mlp"]
    return plugin_dumps(p150.path, texts, tmp_path_factory.mktemp("exports"))


@pytest.fixture(scope="module")
def tree(exports, tmp_path_factory) -> Path:
    """A nightly's folder: vision/mlp, jax/twice (two compiles in one export folder), vhlo-only,
    ttir-only, broken (a StableHLO dump cut short), and a file that is no dump at all."""
    root = tmp_path_factory.mktemp("nightly")
    shutil.copytree(exports["mlp"], root / "vision" / "mlp")
    twice = root / "jax" / "twice"
    shutil.copytree(exports["jax-mlp"], twice)
    shutil.copytree(exports["jax-mlp-again"], twice, dirs_exist_ok=True)  # later stamps: the second compile
    irs = exports["mlp"] / "irs"
    for name, stage in (("vhlo-only", "vhlo"), ("ttir-only", "ttir")):
        (root / name / "irs").mkdir(parents=True)
        (source,) = irs.glob(f"{stage}_[0-9]*.mlir")
        shutil.copy(source, root / name / "irs" / source.name)
    (root / "broken" / "irs").mkdir(parents=True)
    (shlo,) = irs.glob("shlo_[0-9]*.mlir")
    (root / "broken" / "irs" / shlo.name).write_text(shlo.read_text()[:300])
    (root / "vision" / "notes.txt").write_text("not a dump")
    return root


def test_the_plugin_writes_every_stage_named_by_stage_and_stamp(exports):
    files = dumps._dump_files(exports["mlp"])
    assert [f.stage for f in files] == list(dumps.STAGE_ORDER)  # written in pipeline order
    assert all(dumps.stage_of(f.path) == (f.stage, f.stamp) for f in files)


def test_stage_names_are_told_apart_longest_first():
    assert dumps.stage_of(Path("irs/shlo_compiler_cleaned_1795426554302.mlir")) == ("shlo_compiler_cleaned",
                                                                                     1795426554302)
    assert dumps.stage_of(Path("irs/shlo_1795426554302.mlir"))[0] == "shlo"
    assert dumps.stage_of(Path("irs/ttnn_runtime_1795426554302.mlir"))[0] == "ttnn_runtime"
    assert dumps.stage_of(Path("irs/shlo_resnet50_1795426554302.mlir"))[0] == "shlo"  # a name before the stamp
    assert dumps.stage_of(Path("fb_1795426554302.ttnn"))[0] == "fb"
    assert dumps.stage_of(Path("irs/shlo.mlir")) is None and dumps.stage_of(Path("irs/notes_1795426554302.txt")) is None


def test_a_tree_is_one_model_per_dumped_module_from_its_most_frontend_like_stage(tree):
    modules = {m.name: m for m in dumps.scan(tree)}
    assert set(modules) == {"vision.mlp", "jax.twice.1", "jax.twice.2", "vhlo-only", "ttir-only", "broken"}
    assert {name: m.chosen[0] for name, m in modules.items()} == {
        "vision.mlp": "shlo", "jax.twice.1": "shlo", "jax.twice.2": "shlo", "vhlo-only": "vhlo",
        "ttir-only": "ttir", "broken": "shlo"}
    # the two compiles of one folder keep their own files
    first, second = modules["jax.twice.1"], modules["jax.twice.2"]
    assert len(first.files) == len(second.files) == len(dumps.STAGE_ORDER)
    assert set(first.files.values()).isdisjoint(second.files.values())


def test_the_tree_is_analysed_whole_failures_recorded_ops_deduplicated_globally(tree, tmp_path):
    from opbyop.pipeline import manifest, prepare, write_manifest

    prepared = prepare([str(tree), "mlp"])
    assert set(prepared.graphs) == {"vision.mlp", "jax.twice.1", "jax.twice.2", "vhlo-only", "mlp"}
    assert set(prepared.errors) == {"ttir-only", "broken"}
    assert prepared.errors["ttir-only"].startswith("not supported:") and "TTIR" in prepared.errors["ttir-only"]
    assert str(tree / "broken") in prepared.errors["broken"]
    assert prepared.graphs["vhlo-only"].frontend == "vhlo dump"

    def signatures(model: str) -> set[str]:
        return {r.signature for r in prepared.splits[model].ops if r.ok}

    # the plugin's StableHLO of mlp is the module the zoo exported; its VHLO deserialises to the same ops
    assert signatures("vision.mlp") == signatures("mlp") == signatures("vhlo-only")
    assert signatures("jax.twice.1") == signatures("jax.twice.2")
    assert len(prepared.unique) == len(signatures("mlp") | signatures("jax.twice.1"))
    by_signature = {op.signature: op for op in prepared.unique}
    for signature in signatures("mlp"):
        assert {"vision.mlp", "mlp", "vhlo-only"} <= set(by_signature[signature].models)
    # every occurrence of every model is kept, with its position
    assert sum(len(op.occurrences) for op in prepared.unique) == sum(1 for r in prepared.records if r.ok)

    path = write_manifest(prepared, tmp_path / "out" / "manifest.json")
    data = json.loads(path.read_text())
    assert data == json.loads(manifest(prepared).model_dump_json())
    assert data["ops_unique"] == len(prepared.unique) and data["ops_total"] == len(prepared.records)
    models = {m["name"]: m for m in data["models"]}
    assert models["broken"]["error"] and models["vision.mlp"]["source"].endswith("#vision.mlp")
    assert models["vision.mlp"]["unique"] == len(signatures("vision.mlp"))
    for op in data["ops"]:
        known = by_signature[op["signature"]]
        assert [(o["model"], o["position"]) for o in op["occurrences"]] == [(o.model, o.position)
                                                                            for o in known.occurrences]
        assert op["models"] == known.models


def test_a_dump_folder_named_like_another_model_gets_its_own_name(exports):
    from opbyop.pipeline import prepare

    prepared = prepare(["mlp", str(exports["mlp"])])  # the export folder itself is named mlp
    assert set(prepared.graphs) == {"mlp", "mlp.2"}
    assert {r.model for r in prepared.splits["mlp.2"].ops} == {"mlp.2"}


def test_one_module_loads_by_folder_or_file_and_a_folder_of_several_is_refused(tree):
    from opbyop.errors import ModuleError
    from opbyop.frontends.loader import load_model

    assert load_model(str(tree / "vision" / "mlp")).name == "mlp"
    (vhlo,) = (tree / "vhlo-only" / "irs").glob("vhlo_*.mlir")
    assert load_model(str(vhlo)).name == "vhlo-only"
    with pytest.raises(ModuleError, match="holds 2 dumped modules"):
        load_model(str(tree / "jax" / "twice"))


def test_a_runs_split_thread_splits_each_module_of_a_dump_folder_on_its_own(tree):
    """What the analyze flow and the deployments do with a folder in their `models` parameter."""
    from opbyop.pipeline import Prepared
    from opbyop.run.models import Splits

    arrived = list(Splits().ask([str(tree / "jax")], 0).arriving(idle=lambda: None))
    assert len(arrived) == 2 and all(split_spec(model.spec) for model in arrived)
    prepared = Prepared()
    for model in arrived:
        prepared.add(model.spec, model.graph, model.split, model.error)
    # named from their folder below the one given
    assert set(prepared.graphs) == {"twice.1", "twice.2"} and not prepared.errors


@pytest.mark.slow
def test_compile_takes_a_dump_folder_and_writes_the_manifest(tree, tmp_path):
    from test_cli import opbyop

    manifest = tmp_path / "manifest.json"
    out = opbyop(tmp_path / "home", "compile", str(tree / "jax"), str(tree / "ttir-only"), "--no-whole",
                 "--manifest", str(manifest), expect=1)  # one model not supported: exit 1, the others analysed
    assert "not supported" in out and "dot_general" in out and f"manifest: {manifest}" in out
    data = json.loads(manifest.read_text())
    assert {m["name"] for m in data["models"]} == {"twice.1", "twice.2", "ttir-only"}
    assert all(set(op["models"]) == {"twice.1", "twice.2"} for op in data["ops"])
