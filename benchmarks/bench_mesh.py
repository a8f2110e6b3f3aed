"""The cost of op by op on a mesh: per unique op, a model on one chip against its sharded variant on a
mesh, side by side in one run. Goal: no more per unique op on the mesh than on one chip, plus the
collectives' own simulation.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_mesh.py [--single llama:p150 cnn:p150]
        [--mesh llama-tp-1x2:p300 llama-tp-2x4:p150x8:2x4 cnn-dp-1x2:p300]

Split (with Shardy's propagation on the sharded model) is timed, then every unique op analysed in a
warm worker as `opbyop analyze` does (compile, the simulated device, golden on XLA:CPU: a host mesh
for the sharded model), each part's median and mean per op; the TTNN collectives the mesh programs
hold are counted, and the simulator's wall time in them (DeviceRun.collective_seconds) is summed.
Each mesh case is held against the one-chip case whose model its name starts with (cnn-dp-1x2 against
cnn): mesh op / (one-chip op + the mesh op's collectives), by mean and by median, for the whole
analysis and for the device alone. `--compile-only` leaves the device and golden out.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common import Figures, median_ms, timed

from opbyop.compiler.targets import target_for

COLLECTIVE = re.compile(r'"(ttnn\.(?:all_reduce|all_gather|reduce_scatter|collective_permute|all_to_all|'
                        r'point_to_point|mesh_shard|distribute_tensor|aggregate_tensor)\w*)"')


@dataclass
class CaseFigures:
    """One model on one target: each unique op's seconds, whole and by part."""

    model: str
    totals: list[float] = field(default_factory=list)
    compiles: list[float] = field(default_factory=list)
    devices: list[float] = field(default_factory=list)
    goldens: list[float] = field(default_factory=list)
    collectives: list[float] = field(default_factory=list)  # per op with a device run (0 on one chip)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", nargs="*", default=["llama:p150", "cnn:p150"],
                        help="MODEL:CHIP on one chip (the baselines)")
    parser.add_argument("--mesh", nargs="*", default=["llama-tp-1x2:p300", "cnn-dp-1x2:p300"],
                        help="MODEL:CHIP[:MESH] on a mesh")
    parser.add_argument("--compile-only", action="store_true", help="no device run, no golden")
    args = parser.parse_args()
    cases = [*args.single, *args.mesh]
    chips = max(target_for(*_chip_mesh(c)).chips for c in cases)
    os.environ["OPBYOP_HOST_DEVICES"] = str(chips)  # before JAX starts (in this process and the workers)

    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_zoo
    from opbyop.pipeline import prepare
    from opbyop.worker.process import OpWorker
    from opbyop.workspace import Workspace

    settings = AnalysisSettings(run_device=False, run_golden=False) if args.compile_only else AnalysisSettings()
    figures = Figures(f"op by op on one chip and on meshes ({'compile only' if args.compile_only else 'analyze'}, "
                      "warm worker; per unique op, median ms)",
                      ["model", "chip", "mesh", "ops", "unique", "split s", "op ms", "compile ms", "device ms",
                       "golden ms", "collectives ms", "analyze s total", "flatbuffer", "statuses", "TTNN collectives",
                       "first failure"])
    measured: dict[str, CaseFigures] = {}
    zoo = load_zoo()
    for case in cases:
        model = case.split(":")[0]
        chip, mesh = _chip_mesh(case)
        target = target_for(chip, mesh)
        with timed() as split_time:
            prepared = prepare([model], zoo, target=target)
        if prepared.errors:
            figures.add(model, chip, target.mesh_text, "", "", "", "", "", "", "", "", prepared.errors[model][:60])
            continue
        desc = resolve(chip)
        ok, collectives, statuses, first_failure = 0, Counter(), Counter(), ""
        got = measured[case] = CaseFigures(model)
        # a fresh home per case: no case finds another's XLA executables or artifacts on disk
        with tempfile.TemporaryDirectory() as home, OpWorker(desc.path, Path(home), chip=chip,
                                                             name=f"bench-{chip}") as worker:
            artifacts = Workspace(Path(home)).artifacts
            for op in prepared.unique:
                result = worker.analyze(op, settings.model_copy(update={"mesh": target.mesh_text}), timeout=300)
                got.totals.append(result.seconds)
                statuses[result.status.value] += 1
                if result.status.value != "success" and not first_failure:
                    first_failure = f"{result.status.value}: {result.message}"
                if result.device is not None:
                    got.devices.append(result.device.seconds)
                    got.collectives.append(result.device.collective_seconds)
                if result.golden is not None:
                    got.goldens.append(result.golden.seconds)
                if result.compile is not None:
                    got.compiles.append(result.compile.seconds)
                    if result.compile.ok:
                        ok += 1
                        program = artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
                        collectives.update(COLLECTIVE.findall(program))
        figures.add(model, chip, target.mesh_text, len(prepared.records), len(prepared.unique), split_time.wall,
                    median_ms(got.totals), median_ms(got.compiles), _or_dash(got.devices), _or_dash(got.goldens),
                    _or_dash(got.collectives), sum(got.totals), f"{ok}/{len(prepared.unique)}",
                    ", ".join(f"{k} {v}" for k, v in statuses.most_common()),
                    ", ".join(f"{k.removeprefix('ttnn.')} {v}" for k, v in collectives.most_common()) or "-",
                    first_failure or "-")
    figures.show()
    print("op ms: median over the unique ops of the worker's whole analysis of one op; compile/device/golden ms: "
          "each part's median as the worker measured it; collectives ms: the simulator's time in collectives "
          "(median); split s: export, propagation, split")
    show_goal(measured, args.single, args.mesh)


def show_goal(measured: dict[str, CaseFigures], singles: list[str], meshes: list[str]) -> None:
    """Each mesh case against its one-chip baseline plus its own collectives' simulation."""
    goal = Figures("the goal: mesh op <= one-chip op + the mesh op's collectives (ratio <= 1.0 meets it)",
                   ["mesh case", "one-chip case", "op ms mesh (mean)", "op ms one chip (mean)",
                    "collectives ms (mean)", "ratio by mean", "ratio by median", "device ratio by mean",
                    "device ratio by median"])
    for case in meshes:
        mesh = measured.get(case)
        base_case = next((s for s in sorted(singles, key=len, reverse=True)
                          if case.startswith(s.split(":")[0])), None)
        base = measured.get(base_case) if base_case else None
        if mesh is None or base is None or not mesh.totals or not base.totals:
            goal.add(case, base_case or "-", "", "", "", "no baseline measured", "", "", "")
            continue
        coll_mean, coll_median = _mean(mesh.collectives), _median(mesh.collectives)
        devices = bool(mesh.devices and base.devices)
        goal.add(case, base_case, 1000 * _mean(mesh.totals), 1000 * _mean(base.totals), 1000 * coll_mean,
                 _mean(mesh.totals) / (_mean(base.totals) + coll_mean),
                 _median(mesh.totals) / (_median(base.totals) + coll_median),
                 _mean(mesh.devices) / (_mean(base.devices) + coll_mean) if devices else "-",
                 _median(mesh.devices) / (_median(base.devices) + coll_median) if devices else "-")
    goal.show()


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _or_dash(values: list[float]) -> float | str:
    return median_ms(values) if values else "-"


def _chip_mesh(case: str) -> tuple[str, str | None]:
    parts = case.split(":")
    return parts[1], (parts[2] if len(parts) > 2 else None)


if __name__ == "__main__":
    main()
