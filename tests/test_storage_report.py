"""The HTML report: self-contained, and rendered for real in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import store_samples as samples

from opbyop.errors import OpbyopError
from opbyop.records import AccuracyTrace, TtsimOutcome, TtsimRun
from opbyop_storage.dataset import Store
from opbyop_storage.expectations import from_outcomes, outcomes
from opbyop_storage.exports.report import render_html, report_data, write_report, write_report_apart

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=60)


def test_report_is_self_contained(history_store: Store, tmp_path: Path) -> None:
    out = write_report(history_store.root, "n2", tmp_path / "r.html", use_expectations=False)
    page = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no CDN, no external fetch
    assert "fetch(" not in page and "XMLHttpRequest" not in page and "@import" not in page
    assert page.count("<script") == 2 and "stablehlo.dot_general" in page


def test_data_cannot_close_the_script_element(history_store: Store) -> None:
    data = report_data(history_store.root, "n2")
    data["ops"][0]["message"] = "</script><script>alert(1)</script>"
    assert "</script><script>alert" not in render_html(data)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(history_store: Store, tmp_path: Path) -> None:
    expectations = from_outcomes(outcomes(history_store.results("n1")))
    data = report_data(history_store.root, "n2", expectations)
    out = tmp_path / "report.html"
    out.write_text(render_html(data))

    dom = _chromium(tmp_path, "--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-rendered="true"' in html  # the script ran to its end
    # stacked depth bars drawn by JS: one segment per (model, depth) of the histogram
    segments = re.findall(r'<rect [^>]*class="bar seg"[^>]*data-model="(\w+)"[^>]*data-depth="(\w+)"', html)
    assert set(segments) == {(r["model"], r["depth"]) for r in data["depth_histogram"]}
    assert ("cnn", "SPLIT_FAILED") in segments and ("mlp", "GOLDEN") in segments
    assert len(re.findall(r'class="bar regression"', html)) == 1  # tanh, GOLDEN -> DEVICE_RUN
    assert "trend-line" in html
    # tables filled by JS, with the models and the ops
    assert re.search(r"<td[^>]*>mlp</td>", html) and re.search(r"<td[^>]*>cnn</td>", html)
    assert re.search(r"<td[^>]*>stablehlo.gather</td>", html)
    assert "2 of 2 rows" in html  # models table
    assert re.search(r'id="unexpected-passes".*?stablehlo\.dot_general', html, re.S)
    assert "pass rate (compiler and device verdicts)" in html and "every op got a verdict" in html

    png = tmp_path / "report.png"
    shot = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1000", out.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_the_report_groups_failures_by_the_compiler_pass_they_stopped_in(history_store: Store) -> None:
    data = report_data(history_store.root, "n2")
    rows = {(r["model"], r["failed_pass"]): r for r in data["failed_passes"]}
    assert ("*", "convert-stablehlo-to-ttir") in rows and ("cnn", "convert-stablehlo-to-ttir") in rows
    assert rows[("*", "convert-stablehlo-to-ttir")]["op_names"] == ["stablehlo.gather"]
    assert all(r["failed_stages"] != ["DEVICE_RUN"] for r in data["failed_passes"])  # compile stages only
    assert 'id="failed-passes-chart"' in render_html(data)


def test_the_report_names_the_slowest_compiler_passes_per_op_kind_and_model(history_store: Store) -> None:
    rows = report_data(history_store.root, "n2")["slowest_passes"]
    overall = [r for r in rows if r["model"] == "*" and r["op_name"] == "*"]
    assert [r["rank"] for r in overall] == [1, 2, 3, 4, 5] and overall[0]["pass"] == "ConvertStableHLOToTTIR"
    assert sum(r["share"] for r in overall) == pytest.approx(1.0, abs=1e-3)  # the samples time five passes
    conv = [r for r in rows if r["op_name"] == "stablehlo.convolution"]
    gather = [r for r in rows if r["op_name"] == "stablehlo.gather"]
    assert conv[0]["seconds"] > gather[0]["seconds"]  # kinds differ
    assert {r["model"] for r in rows} >= {"mlp", "cnn", "*"}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (apt-get install -y chromium)")
def test_the_report_shows_the_compiler_pass_each_failure_stopped_in(history_store: Store, tmp_path: Path) -> None:
    data = report_data(history_store.root, "n2")
    out = tmp_path / "report.html"
    out.write_text(render_html(data))
    html = _chromium(tmp_path, "--dump-dom", out.as_uri()).stdout
    assert 'data-rendered="true"' in html
    section = html[html.index('id="failed-passes-chart"'):]
    assert "convert-stablehlo-to-ttir" in section and "stablehlo.gather" in section


def test_the_accuracy_trace_is_its_own_table_and_names_the_first_op_below_the_threshold(history_store: Store) -> None:
    from opbyop_storage.readonly import run_sql

    rows = run_sql("SELECT model, position, op_name, first_below FROM accuracy_trace WHERE run_id = 'n2' "
                   "ORDER BY position", history_store.root).rows
    assert [r[1] for r in rows] == list(range(6)) and {r[0] for r in rows} == {"mlp"}
    assert [r for r in rows if r[3]] == [("mlp", 4, "stablehlo.dot_general", True)]
    data = report_data(history_store.root, "n2")
    assert max(data["accuracy_trace"], key=lambda r: r["added_loss"])["position"] == 4
    assert 'id="accuracy-trace-chart"' in render_html(data)
    stored = history_store.models("n2") if hasattr(history_store, "models") else None
    if stored is not None:
        whole = {m.summary.model: m.summary.whole for m in stored}["mlp"]
        assert whole.accuracy_trace.first_below == 4 and len(whole.accuracy_trace.points) == 6


def _night_traced_on_ttsim(store: Store) -> AccuracyTrace:
    """Night n3 into `store`, its mlp run whole on ttsim too and traced there: five of the model's six
    ops compared on ttsim's values, the threshold crossed earlier (op 2) than on the model's (op 4)."""
    n3 = samples.night("n3", 4, samples.NIGHT2, zoo_night=2)
    model = n3.models[0].whole.accuracy_trace
    pccs = {0: (1.0, 0.0), 1: (0.9999, 0.0001), 2: (0.985, 0.0149), 4: (0.98, 0.005), 5: (0.97, 0.01)}  # pcc, lost
    points = [p.model_copy(update={"pcc": pccs[p.position][0], "added_loss": pccs[p.position][1],
                                   "below_threshold": pccs[p.position][0] < 0.99})
              for p in model.points if p.position in pccs]
    trace = model.model_copy(update={"points": points, "first_below": 2, "first_below_op": points[2].op_name,
                                     "most_added": [2, 5], "traced_ops": 6, "seconds": 0.7})
    ttsim = TtsimRun(outcome=TtsimOutcome.RAN, seconds=2.5, pcc=0.97, accuracy_trace=trace)
    n3.models[0] = n3.models[0].model_copy(update={"whole": n3.models[0].whole.model_copy(update={"ttsim": ttsim})})
    store.write_run(n3.run, n3.ops, n3.results, n3.models)
    return trace


def test_a_whole_models_trace_on_ttsim_is_stored_and_read_beside_the_models_own(history_store: Store) -> None:
    from opbyop_storage.readonly import run_sql

    trace = _night_traced_on_ttsim(history_store)
    whole = {m.summary.model: m.summary.whole for m in history_store.models("n3")}["mlp"]
    assert whole.ttsim.accuracy_trace == trace and whole.accuracy_trace.first_below == 4
    rows = run_sql("SELECT backend, position, first_below, pcc_threshold FROM accuracy_traces WHERE run_id = 'n3' "
                   "ORDER BY backend, position", history_store.root).rows
    assert [(r[0], r[1]) for r in rows] == [("model", p) for p in range(6)] + [("ttsim", p) for p in (0, 1, 2, 4, 5)]
    assert [(r[0], r[1]) for r in rows if r[2]] == [("model", 4), ("ttsim", 2)]
    assert {r[3] for r in rows} == {0.99}
    # the view of the model's trace keeps its columns and its rows: ttsim's points are in accuracy_traces only
    columns = [r[0] for r in run_sql("DESCRIBE accuracy_trace", history_store.root).rows]
    assert columns == ["run_id", "date", "model", "position", "op_name", "ttnn_op", "pcc", "max_abs_error",
                       "added_loss", "below_threshold", "first_below", "location", "pcc_threshold"]
    assert run_sql("SELECT count(*) FROM accuracy_trace WHERE run_id = 'n3'", history_store.root).rows == [(6,)]
    older = run_sql("SELECT DISTINCT backend FROM accuracy_traces WHERE run_id = 'n2'", history_store.root).rows
    assert older == [("model",)]  # a model not run on ttsim has the model's trace alone


def test_the_reports_trace_rows_name_their_backend_and_rank_losses_per_backend(history_store: Store) -> None:
    _night_traced_on_ttsim(history_store)
    data = report_data(history_store.root, "n3")
    rows = data["accuracy_trace"]
    assert {(r["backend"], r["first_below"]) for r in rows if r["first_below"]} == {("model", True), ("ttsim", True)}
    assert [r["loss_rank"] for r in rows if r["backend"] == "ttsim" and r["position"] == 2] == [1]  # ranked per backend
    assert 'id="accuracy-trace-chart"' in render_html(data)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (apt-get install -y chromium)")
def test_the_rendered_report_draws_a_models_trace_on_ttsim_beside_its_own(history_store: Store,
                                                                          tmp_path: Path) -> None:
    _night_traced_on_ttsim(history_store)
    data = report_data(history_store.root, "n3")
    out = tmp_path / "report.html"
    out.write_text(render_html(data))
    html = _chromium(tmp_path, "--dump-dom", out.as_uri()).stdout
    assert 'data-rendered="true"' in html
    charts = re.findall(r'<svg [^>]*class="accuracy-trace"[^>]*>.*?</svg>', html, re.S)
    (mlp,) = [c for c in charts if 'data-model="mlp"' in c]
    assert re.findall(r'<polyline [^>]*class="trace-line" data-backend="(\w+)"', mlp) == ["model", "ttsim"]
    assert "on ttsim" in mlp and "on the device model" in mlp


def test_the_report_shows_how_the_device_model_agrees_with_ttsim_per_op_kind(history_store: Store) -> None:
    """Night n4's successful ops ran on ttsim too: two bit-equal, one within ulps, one apart by another
    sign; the report's ttsim section counts them per op kind with the largest differences."""
    n4 = samples.night("n4", 5, samples.NIGHT2, zoo_night=2)
    runs = [TtsimRun(outcome=TtsimOutcome.RAN, agreement="bit_equal", max_ulps=0.0, max_error=0.0),
            TtsimRun(outcome=TtsimOutcome.RAN, agreement="within_ulps", max_ulps=2.0, max_error=3e-8, difference="rounding"),
            TtsimRun(outcome=TtsimOutcome.RAN, agreement="differ", max_ulps=2.05e9, max_error=0.4, difference="sign"),
            TtsimRun(outcome=TtsimOutcome.RAN, agreement="bit_equal", max_ulps=0.0, max_error=0.0)]
    results = list(n4.results)
    ran = [i for i, r in enumerate(results) if r.device is not None][:len(runs)]
    for i, run in zip(ran, runs):
        results[i] = results[i].model_copy(update={"ttsim": run, "device_backend": "ttsim"})
    history_store.write_run(n4.run, n4.ops, results, n4.models)
    data = report_data(history_store.root, "n4")
    rows = data["ttsim_agreement"]
    assert sum(r["programs"] for r in rows) == len(ran) == 4
    assert (sum(r["bit_equal"] for r in rows), sum(r["within_ulps"] for r in rows), sum(r["differ"] for r in rows)) \
        == (2, 1, 1)
    (apart,) = [r for r in rows if r["differ"]]
    assert apart == {**apart, "differences": "sign", "max_ulps": 2.05e9, "max_error": 0.4}
    assert rows[0] is apart  # what differs comes first
    html = render_html(data)
    assert 'id="ttsim-section"' in html and 'id="ttsim-agreement-table"' in html
    assert report_data(history_store.root, "n2")["ttsim_agreement"] == []  # a night not run on ttsim: none


def test_a_report_written_apart_is_the_report_and_its_failure_says_how_to_rebuild_it(history_store: Store,
                                                                                      tmp_path: Path) -> None:
    """A run's publish step writes its report in a process of its own (what a report holds is given
    back when it ends); the page is the one write_report makes, and a failure carries the child's words."""
    run_id = history_store.runs()[-1].run_id
    apart = write_report_apart(history_store.root, run_id, tmp_path / "apart.html")
    here = write_report(history_store.root, run_id, tmp_path / "here.html")

    def stamped_out(page: str) -> str:  # each page says when it was generated
        return re.sub(r'"generated_at":"[^"]*"', "", page)

    assert stamped_out(apart.read_text()) == stamped_out(here.read_text())
    with pytest.raises(OpbyopError) as failed:
        write_report_apart(history_store.root, "no-such-run", tmp_path / "none.html")
    assert "'no-such-run' is not in the store" in failed.value.problem
    assert failed.value.fix == f"rebuild it with `opbyop report --run no-such-run --out {tmp_path / 'none.html'}`"
    assert not (tmp_path / "none.html").exists()
