"""The single-op corpus: generation, a handful of files through the real pipeline, the coverage
table from a results directory and from the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbyop.corpus.case import Form
from opbyop.corpus.catalog import ALL_DTYPES, BUILDERS, cases
from opbyop.corpus.coverage import CoverageRow, coverage
from opbyop.corpus.generate import generate, load_manifest
from opbyop.corpus.run import read_results, run_entries, select
from opbyop.errors import OpbyopError
from opbyop.records import Status, TtsimOutcome

DATA = Path(__file__).parent / "data"


def test_generation_is_reproducible_and_every_module_verifies(tmp_path: Path):
    ops = ["add", "scatter", "reduce", "while", "convolution"]
    first = generate(tmp_path / "a", ops, ["f32", "i64", "complex<f32>"])
    second = generate(tmp_path / "b", ops, ["f32", "i64", "complex<f32>"])
    assert [e.file for e in first.entries] == [e.file for e in second.entries]
    for entry in first.entries:  # byte-identical: constant values come from the file's own name
        assert (tmp_path / "a" / entry.file).read_bytes() == (tmp_path / "b" / entry.file).read_bytes()
    assert {e.form for e in first.entries} == {Form.ARGS, Form.CONST}
    assert load_manifest(tmp_path / "a").by_file().keys() == {e.file for e in first.entries}
    const_add = (tmp_path / "a" / "add-f32-3x50-const.mlir").read_text()
    assert "func.func @main()" in const_add and const_add.count("stablehlo.constant") == 2


def test_the_catalog_admits_only_the_dtypes_the_spec_does():
    def dtypes(op: str) -> set[str]:
        return {c.dtype for c in cases([op])}

    assert dtypes("not") == {"i1", "i8", "i16", "i32", "i64", "ui8", "ui32", "ui64"}
    assert "complex<f32>" not in dtypes("sort") and "i1" not in dtypes("dot_general")
    assert dtypes("add") == set(ALL_DTYPES)
    assert {c.dtype for c in cases(["linalg"]) if c.op == "fft"} == {"complex<f32>"}
    assert {c.op for c in cases(["linalg"])} == {"cholesky", "triangular_solve", "fft"}
    assert len(BUILDERS) > 50


def test_an_empty_selection_is_refused_with_a_fix(tmp_path: Path):
    with pytest.raises(OpbyopError, match="no corpus case"):
        generate(tmp_path, ["sort"], ["complex<f32>"])


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, worker, workspace, settings):
    """Four corpus files through the session's real worker (p150): compile, device, XLA golden."""
    root = tmp_path_factory.mktemp("corpus")
    manifest = generate(root / "corpus", ["add", "scatter", "while", "sort"], ["f32"])
    entries = select(manifest.entries, names=["add-f32-3x50-args.mlir", "scatter-rows_add-f32-8x4-args.mlir",
                                              "while-doubling-f32-s-args.mlir", "sort-GT-f32-3x50-const.mlir"])
    analyse = lambda u: worker.analyze(u, settings, 300)  # noqa: E731
    first = run_entries(root / "corpus", entries, root / "out", "p150", analyse, workspace.artifacts.read_text)
    again = run_entries(root / "corpus", entries, root / "out", "p150", analyse, workspace.artifacts.read_text)
    return root, first, again


def test_corpus_files_run_through_the_real_pipeline_and_resume(corpus_run):
    root, first, again = corpus_run
    assert (first.analysed, first.skipped) == (4, 0)
    assert (again.analysed, again.skipped) == (0, 4)  # a second run only does what is missing
    results = {r.entry.file: r for r in read_results(root / "out")}
    assert len(results) == 4
    for r in results.values():
        assert r.result.status is Status.SUCCESS, (r.entry.file, r.result.message)
        assert r.ttnn_ops and all(op.startswith(("ttnn.", "ttcore.")) for op in r.ttnn_ops)
    assert "ttnn.rows_scatter" in results["scatter-rows_add-f32-8x4-args.mlir"].ttnn_ops
    assert "ttcore.while_loop" in results["while-doubling-f32-s-args.mlir"].ttnn_ops


def test_coverage_table_from_a_results_directory(corpus_run):
    root, _, _ = corpus_run
    report = coverage(CoverageRow.from_corpus(r) for r in read_results(root / "out"))
    seen = {o.ttnn_op: o for o in report.ops}
    assert seen["ttnn.rows_scatter"].simulated and seen["ttnn.rows_scatter"].passes["f32"] == 1
    assert report.simulated_share == 1.0
    assert [d.dtype for d in report.dtypes] == ["f32"] and report.dtypes[0].pass_rate == 1.0
    out = CliRunner().invoke(_app(), ["coverage", str(root / "out"), "--failures"])
    assert out.exit_code == 0, out.output
    assert "ttnn.rows_scatter" in out.output and "ttcore.while_loop" in out.output
    as_json = json.loads(CliRunner().invoke(_app(), ["coverage", str(root / "out"), "-f", "json"]).output)
    assert as_json["dtypes"][0]["pass_rate"] == 1.0 and not as_json["failures"]


def test_coverage_counts_not_simulated_runs_by_the_op_they_name():
    rows = [CoverageRow("a.mlir", "stablehlo.x", "f32", Status.NOT_SIMULATED, "not simulated: ttnn.frobnicate",
                        ("ttnn.to_layout", "ttnn.frobnicate")),
            CoverageRow("b.mlir", "stablehlo.y", "bf16", Status.GOLDEN_FAILED, "output mismatch", ("ttnn.to_layout",)),
            CoverageRow("c.mlir", "stablehlo.y", "bf16", Status.SUCCESS, None, ("ttnn.to_layout",))]
    report = coverage(rows)
    ops = {o.ttnn_op: o for o in report.ops}
    assert not ops["ttnn.frobnicate"].simulated and ops["ttnn.frobnicate"].not_simulated_runs == 1
    assert ops["ttnn.to_layout"].programs == 3 and ops["ttnn.to_layout"].pass_rate == 0.5
    assert report.ops[0].ttnn_op == "ttnn.frobnicate"  # what is missing comes first
    assert [r.label for r in report.failures()] == ["b.mlir", "a.mlir"]


def test_coverage_on_ttsim_counts_ran_programs_per_op_and_stops_against_the_op_named():
    limit = "ERROR: UnsupportedFunctionality: tensix_sfpgt: lreg_dest=9"
    rows = [CoverageRow("a.mlir", "stablehlo.add", "bf16", Status.SUCCESS, None, ("ttnn.to_layout", "ttnn.add"),
                        ttsim=TtsimOutcome.RAN),
            CoverageRow("b.mlir", "stablehlo.max", "f32", Status.SIMULATOR_LIMIT, limit,
                        ("ttnn.to_layout", "ttnn.maximum"), ttsim=TtsimOutcome.LIMIT, ttsim_op="ttnn.maximum",
                        ttsim_message=limit),
            CoverageRow("c.mlir", "stablehlo.max", "bf16", Status.SIMULATOR_LIMIT, limit, ("ttnn.maximum",),
                        ttsim=TtsimOutcome.LIMIT, ttsim_op="ttnn.maximum", ttsim_message=limit),
            CoverageRow("d.mlir", "stablehlo.y", "bf16", Status.SUCCESS, None, ("ttnn.to_layout",))]
    report = coverage(rows)
    ops = {o.ttnn_op: o for o in report.ops}
    assert ops["ttnn.to_layout"].ttsim == {TtsimOutcome.RAN: 1}  # the model-only row counts nowhere here
    assert ops["ttnn.maximum"].ttsim == {TtsimOutcome.LIMIT: 2} and not ops["ttnn.add"].ttsim[TtsimOutcome.LIMIT]
    assert len(report.on_ttsim) == 3
    assert report.ttsim_stops() == [(TtsimOutcome.LIMIT, "ttnn.maximum", limit, 2)]


def test_coverage_from_a_run_in_the_store(tmp_path: Path, monkeypatch):
    """A stored result whose compiled program is in the workspace's artifact store: the named query
    lists it, `opbyop coverage --rows` reads its TTNN ops from the artifact."""
    from opbyop_storage.aggregate import run_query
    from opbyop_storage.dataset import Store
    from opbyop_storage.readonly import StoreConnection

    from opbyop.artifacts import ArtifactStore
    from opbyop.records import CompileOutcome, OpRecord, OpResult, RunInfo, Stage, TensorDesc

    home = tmp_path / "home"
    digest = ArtifactStore(home / "artifacts").put((DATA / "ttnn_case.mlir").read_bytes(), ".mlir")
    record = OpRecord(model="m", position=0, op_name="stablehlo.case", signature="s1",
                      inputs=[TensorDesc(shape=(), dtype="i32"), TensorDesc(shape=(3, 50), dtype="f32")],
                      outputs=[TensorDesc(shape=(3, 50), dtype="f32")], module_text="module {}")
    result = OpResult(signature="s1", op_name="stablehlo.case", status=Status.SUCCESS, depth=Stage.GOLDEN,
                      compile=CompileOutcome(reached=Stage.FLATBUFFER, artifacts={"ttnn_runtime": digest}))
    store = Store(tmp_path / "store")
    store.write_run(RunInfo(run_id="corpus-1", chip="n150", status="completed"), [record], [result], [])
    with StoreConnection(store.root) as con:
        rows = run_query(con, "ttnn_programs", run_id="corpus-1").records()
    assert rows[0]["ttnn_runtime"] == digest and rows[0]["dtype"] == "i32" and rows[0]["chip"] == "n150"
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps(rows, default=str))
    monkeypatch.setenv("OPBYOP_HOME", str(home))
    out = CliRunner().invoke(_app(), ["coverage", "--rows", str(rows_file), "-f", "json"])
    assert out.exit_code == 0, out.output
    ops = {o["ttnn_op"]: o for o in json.loads(out.output)["ops"]}
    assert ops["ttcore.case"]["simulated"] and ops["ttcore.case"]["per_dtype"]["i32"] == {"passes": 1, "verdicts": 1}


@pytest.mark.slow
def test_the_corpus_commands_generate_run_resume_and_run_nightly(tmp_path: Path, monkeypatch):
    """`opbyop corpus generate | run | nightly` through the CLI, each with a fresh real worker (p150)."""
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))
    cli = CliRunner()
    made = cli.invoke(_app(), ["corpus", "generate", str(tmp_path / "corpus"), "--op", "add", "--dtype", "f32"])
    assert made.exit_code == 0, made.output
    written = len(load_manifest(tmp_path / "corpus").entries)
    assert f"wrote {written} modules" in made.output and written >= 2
    complex64 = cli.invoke(_app(), ["corpus", "generate", str(tmp_path / "c64"), "--op", "add", "--dtype", "complex64"])
    assert complex64.exit_code == 0 and {e.dtype for e in load_manifest(tmp_path / "c64").entries} == {"complex<f32>"}
    run = ["corpus", "run", str(tmp_path / "corpus"), "--out", str(tmp_path / "out"), "--chip", "p150",
           "--file", "add-f32-3x50-*"]
    first, again = cli.invoke(_app(), run), cli.invoke(_app(), run)
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    analysed = int(first.output.split()[0])
    assert analysed >= 1 and f"0 analysed, {analysed} already in" in again.output  # resumed, nothing redone
    assert all(r.result.status is Status.SUCCESS for r in read_results(tmp_path / "out"))
    nothing = cli.invoke(_app(), run[:-1] + ["no-such-file-*.mlir"])
    assert nothing.exit_code != 0 and "no corpus file matches" in nothing.output
    (tmp_path / "corpus.yaml").write_text("chips: [p150]\nops: [exponential]\ndtypes: [f32]\nforms: [args]\n")
    nightly = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert nightly.exit_code == 0, nightly.output
    assert "ttnn.exp" in nightly.output and "100.0%" in nightly.output  # its coverage tables
    assert len(list((tmp_path / "home" / "corpus-results" / "p150").glob("jax-tt-plugin-*/results.jsonl"))) == 1
    second_night = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert second_night.exit_code == 0 and "p150 f32: 0 analysed" in second_night.output  # same compiler, options: kept
    with open(tmp_path / "corpus.yaml", "a") as config:
        config.write("compiler: {math_fidelity: lofi}\n")
    other = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert other.exit_code == 0 and "p150 f32: 0 analysed" not in other.output  # other options: run anew
    assert len(list((tmp_path / "home" / "corpus-results" / "p150").glob("jax-tt-plugin-*/results.jsonl"))) == 2


def _app():
    from opbyop.cli import coverage_cmds  # noqa: F401  (registers the commands)
    from opbyop.cli.app import app

    return app
