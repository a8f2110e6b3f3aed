"""A run's time line: every second of it on one step, the steps adding up to its wall time, what ran
beside kept apart; checked on the clock itself and on a real `opbyop analyze mlp` (and the same command
again, which has nothing to analyse and starts no cluster)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opbyop_flows.engine.phases import BESIDE, OTHER, PhaseClock, format_phases, time_line
from opbyop_storage.dataset import Store

ROOT = Path(__file__).resolve().parents[1]


def test_the_steps_add_up_to_the_total_and_what_ran_beside_is_kept_apart():
    now = time.monotonic()  # the caller's start-up: 0.2 s of waiting for the server, before the clock
    clock = PhaseClock(before={"server": 0.2, "server" + BESIDE: 0.3}, started=now - 0.2, since=now)
    with clock.phase("descriptor"):
        time.sleep(0.05)
    time.sleep(0.03)  # claimed by no step: other
    with clock.phase("split"):
        clock.add("export mlp", 5.0)  # beside: more than the whole run, and still no second counted twice
    time.sleep(0.02)
    clock.mark("export mlp")  # a step that ends now: the time since the last one is its own
    phases = clock.as_dict()
    steps = time_line(phases)
    assert abs(sum(steps.values()) - phases["total"]) < 0.01
    assert phases["export mlp" + BESIDE] == 5.0 and phases[OTHER] >= 0.03 and phases["export mlp"] >= 0.02
    assert list(steps)[:2] == ["server", "descriptor"]  # in the order a run takes them
    assert format_phases(phases).endswith("; beside: server 0.3 s, export mlp 5.0 s")


def test_a_wait_inside_a_step_is_moved_to_its_own_step_never_more_than_the_step_had():
    clock = PhaseClock(started=time.monotonic())
    with clock.phase("descriptor"):
        time.sleep(0.05)
    clock.reassign("descriptor", {"lock wait": 0.03, "plugin assets": 10.0})
    phases = clock.as_dict()
    assert phases["lock wait"] == pytest.approx(0.03, abs=0.002)
    assert phases["descriptor"] == 0.0 and phases["plugin assets"] > 0.0
    assert abs(sum(time_line(phases).values()) - phases["total"]) < 0.01


@pytest.mark.slow
def test_an_analyze_run_puts_every_second_of_its_wall_time_on_its_time_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "OPBYOP_", "JAX_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "OPBYOP_HOME": str(tmp_path / "home"),
                "PYTHONPATH": str(ROOT), "COLUMNS": "300", "NO_COLOR": "1"})
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", "mlp", "--workers", "1",
                           "--run-id", "line", "--export-memory", "8", "--export-timeout", "600"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    phases = Store(tmp_path / "home" / "store").run("line").phases
    steps = time_line(phases)
    assert abs(sum(steps.values()) - phases["total"]) < 0.05, phases  # nothing counted twice, nothing lost
    assert phases["total"] <= wall, (wall, phases)  # the line starts with the command's process
    # and little follows it: no heartbeat thread to join, no last collection, no child holding the output
    assert wall - phases["total"] < 4, (wall, phases)
    assert "leaked" not in done.stderr, done.stderr[-2000:]  # no binding's complaint about the fast exit
    assert steps[OTHER] <= max(1.0, 0.03 * phases["total"]), phases  # no step missing from the line
    # each part of the run is on it: the start-up, the descriptor, the flow, the wait for the exports, the ops
    assert {"imports", "descriptor", "flow start", "export", "split", "warm-up", "fan-out",
            "report"} <= set(steps), phases
    assert {"server" + BESIDE, "export mlp" + BESIDE, "ops" + BESIDE} <= set(phases), phases
    shown = re.search(r"^time: (.*)$", done.stdout, re.M)
    assert shown and "descriptor" in shown.group(1) and "beside: " in shown.group(1), done.stdout[-2000:]

    # the same command again: everything reused, so its cluster is never started (flows/cli/cluster_need.py)
    again = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", "mlp", "--workers", "1",
                            "--run-id", "again", "--export-memory", "8", "--export-timeout", "600"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    store = Store(tmp_path / "home" / "store")
    second = store.run("again").phases
    # neither at the start-up (beside it) nor on the run's first need
    assert not {"cluster", "cluster (beside)", "warm-up", "fan-out"} & set(second), second
    results = store.read_table("results", "again").to_pylist()
    assert results and all(r["reused_from"] == "line" for r in results)
