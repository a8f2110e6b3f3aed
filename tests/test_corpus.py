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
from opbyop.config import AnalysisConfig
from opbyop.corpus.ops import CorpusSelection
from opbyop.corpus.run import run_corpus
from opbyop.workspace import Workspace
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


CASES = ["add-f32-3x50-args.mlir", "scatter-rows_add-f32-8x4-args.mlir", "while-doubling-f32-s-args.mlir",
         "sort-GT-f32-3x50-const.mlir"]


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    """Four corpus cases through the run engine (p150): compile, device, XLA golden, into a real store;
    then the same run id again."""
    from opbyop_storage.dataset import Store
    from opbyop_storage.run_sink import StoreSink

    home = tmp_path_factory.mktemp("corpus-home")
    workspace, store = Workspace(home), Store(home / "store")
    selection = CorpusSelection(ops=["add", "scatter", "while", "sort"], dtypes=["f32"], files=CASES)
    config = AnalysisConfig(models=[], chip="p150", whole_model=False)
    done = []
    for _ in range(2):
        with store.writer() as writer:
            done.append(run_corpus(selection, config, workspace, StoreSink(writer, "corpus-1"), "corpus-test"))
    return home, store, done


def test_corpus_cases_run_through_the_run_engine_into_the_store_and_resume(corpus_run):
    _, store, (first, again) = corpus_run
    assert (len(first.outcome.results), first.outcome.known) == (4, 0)
    assert again.outcome.known == 4  # the run id again: what it stored is not analysed again
    results = {r.entry.file: r for r in first.cases}
    assert sorted(results) == sorted(CASES)
    for r in results.values():
        assert r.result.status is Status.SUCCESS, (r.entry.file, r.result.message)
        assert r.ttnn_ops and all(op.startswith(("ttnn.", "ttcore.")) for op in r.ttnn_ops)
    assert "ttnn.rows_scatter" in results["scatter-rows_add-f32-8x4-args.mlir"].ttnn_ops
    assert "ttcore.while_loop" in results["while-doubling-f32-s-args.mlir"].ttnn_ops
    assert {r.status for r in store.results("corpus-1")} == {Status.SUCCESS}  # queryable like a model's
    assert {o.model for o in store.ops("corpus-1")} == {"corpus"}


def test_coverage_table_of_a_corpus_run_and_of_the_stored_run(corpus_run, monkeypatch):
    home, store, (first, _) = corpus_run
    report = coverage(CoverageRow.from_corpus(r) for r in first.cases)
    seen = {o.ttnn_op: o for o in report.ops}
    assert seen["ttnn.rows_scatter"].simulated and seen["ttnn.rows_scatter"].passes["f32"] == 1
    assert report.simulated_share == 1.0
    assert [d.dtype for d in report.dtypes] == ["f32"] and report.dtypes[0].pass_rate == 1.0
    monkeypatch.setenv("OPBYOP_HOME", str(home))
    out = CliRunner().invoke(_app(), ["coverage", "--run", "corpus-1", "--failures"])
    assert out.exit_code == 0, out.output
    assert "ttnn.rows_scatter" in out.output and "ttcore.while_loop" in out.output
    as_json = json.loads(CliRunner().invoke(_app(), ["coverage", "--run", "corpus-1", "-f", "json"]).output)
    assert as_json["dtypes"][0]["pass_rate"] == 1.0 and not as_json["failures"]
    missing = CliRunner().invoke(_app(), ["coverage", "--run", "no-such-run"])
    assert missing.exit_code == 2 and "no-such-run" in missing.output


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
    lists it, `opbyop coverage --run` reads its TTNN ops from the artifact."""
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
    store = Store(home / "store")
    store.write_run(RunInfo(run_id="corpus-1", chip="n150", status="completed"), [record], [result], [])
    with StoreConnection(store.root) as con:
        rows = run_query(con, "ttnn_programs", run_id="corpus-1").records()
    assert rows[0]["ttnn_runtime"] == digest and rows[0]["dtype"] == "i32" and rows[0]["chip"] == "n150"
    monkeypatch.setenv("OPBYOP_HOME", str(home))
    out = CliRunner().invoke(_app(), ["coverage", "--run", "corpus-1", "-f", "json"])
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
    run = ["corpus", "run", "--chip", "p150", "--op", "add", "--dtype", "f32", "--file", "add-f32-3x50-*",
           "--run-id", "add-f32"]
    first, again = cli.invoke(_app(), run), cli.invoke(_app(), run)
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    assert "2 unique ops: 2 analysed, 0 reused from earlier runs" in first.output
    assert "2 unique ops: 0 analysed, 0 reused from earlier runs, 2 already in this run" in again.output  # resumed
    assert "stored as run add-f32" in first.output
    other = cli.invoke(_app(), run[:-1] + ["add-f32-again"])  # another run: the same ops reused
    assert "0 analysed, 2 reused from earlier runs" in other.output, other.output
    nothing = cli.invoke(_app(), run[:8] + ["--file", "no-such-case-*.mlir"])
    assert nothing.exit_code != 0 and "no corpus case matches" in nothing.output
    (tmp_path / "corpus.yaml").write_text("chips: [p150]\nops: [exponential]\ndtypes: [f32]\nforms: [args]\n")
    nightly = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert nightly.exit_code == 0, nightly.output
    assert "ttnn.exp" in nightly.output and "100.0%" in nightly.output  # its coverage tables
    assert "p150: 4 unique ops, 0 reused" in nightly.output
    second_night = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert second_night.exit_code == 0 and "p150: 4 unique ops, 4 reused" in second_night.output  # same build, options
    with open(tmp_path / "corpus.yaml", "a") as config:
        config.write("compiler: {math_fidelity: lofi}\n")
    lofi = cli.invoke(_app(), ["corpus", "nightly", "--config", str(tmp_path / "corpus.yaml")])
    assert lofi.exit_code == 0 and "p150: 4 unique ops, 0 reused" in lofi.output  # other options: run anew


def _app():
    from opbyop.cli.main import build_app  # every command, the store's too (its entry point)

    return build_app()
