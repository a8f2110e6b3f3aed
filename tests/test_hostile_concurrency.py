"""Two `opbyop` commands on one OPBYOP_HOME: each worker has its own name, scratch and
$TMPDIR, so neither deletes the other's system descriptor ('system desc does not exist' made every
op of the first command compile_failed). Real commands, real compiler, tiny models."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

OPBYOP = [sys.executable, "-m", "opbyop.cli.main"]
ADD = """module {
  func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.add %a, %b : tensor<2x3xf32>
    %1 = stablehlo.tanh %0 : tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  }
}
"""


def test_two_commands_sharing_a_home_both_succeed(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "OPBYOP_HOME": str(home)}
    env.pop("JAX_PLATFORMS", None)
    model = tmp_path / "add.mlir"
    model.write_text(ADD)
    first = subprocess.Popen([*OPBYOP, "run", "mlp", "--no-whole"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while not list(home.glob("logs/cli-*.log")) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the first command's worker is starting: the second now shares the home
        second = subprocess.run([*OPBYOP, "run", str(model)], env=env, capture_output=True, text=True, timeout=600)
        out_first, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, out_first
    assert second.returncode == 0, second.stdout + second.stderr
    assert "compile_failed" not in out_first and "system desc does not exist" not in out_first, out_first
    assert "success:" in out_first and "crashed" not in out_first, out_first
    # the .mlir's @main takes two arguments: its whole-model run gets them, runs on the device and
    # matches XLA:CPU running the same module
    assert "takes 2 arguments" not in second.stdout and "GOLDEN" in second.stdout.split("whole model")[-1], \
        second.stdout
    assert not list((home / "scratch").glob("tmp-*")), "a worker's private $TMPDIR was left behind"
    # logs per command (its worker's, and its verbose compile child's when a compile failed): neither
    # command wrote into the other's
    assert len({p.name.removeprefix("cli-").split("-")[0].removesuffix(".log") for p in home.glob("logs/cli-*.log")}) == 2


def test_torch_models_exported_from_several_threads_at_once_all_export():
    """torch.export keeps process-wide state: two exports at once failed ('ProxyTorchDispatchMode slot
    already occupied', 'Trying to pop empty mode stack'). A standing service can start a run's export
    while a stopped run's export still runs; exports take turns instead."""
    import threading

    from opbyop.config import load_zoo
    from opbyop.frontends.loader import load_model

    zoo = load_zoo()
    errors: list[str] = []

    def export(spec: str) -> None:
        try:
            load_model(spec, zoo)
        except Exception as e:  # noqa: BLE001  (collected: the assertion names them)
            errors.append(f"{spec}: {e}")

    threads = [threading.Thread(target=export, args=(spec,)) for spec in ("mlp", "cnn", "mlp", "cnn")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_run_asked_to_stop_splits_no_further_model():
    """Once the run is stopped, the models its split-ahead thread has not started are not exported
    (a zoo's exports take minutes), and the flow learns why from each model's error."""
    from opbyop_flows.hosting.handoff import Handoff

    handoff = Handoff()
    handoff.stop.set()
    outcomes = list(handoff.splits.ask(["resnet50", "bert-base"], seed=0).arriving(idle=lambda: None))
    assert [o.graph for o in outcomes] == [None, None]
    assert all(o.error and "stopped" in o.error for o in outcomes)
