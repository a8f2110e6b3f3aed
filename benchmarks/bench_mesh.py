"""The cost of op by op on a mesh: per unique op, a sharded model on a mesh against the same model
on one chip, side by side in one run. Goal: no more per unique op on the mesh than on one chip, plus
the collectives' own simulation.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_mesh.py
        [--mesh llama-tp-1x2:p300 llama-tp-2x4:p150x8:2x4 cnn-dp-1x2:p300] [--rounds 2]

Each mesh case's baseline is its own model (the zoo entry's factory, arguments and inputs) without
its sharding plan, on one chip of the board's architecture (p150 for Blackhole boards, n150 for
Wormhole ones): the same global shapes, every op whole on one chip.

Split (with Shardy's propagation on the sharded model) is timed, then every unique op analysed in a
warm worker as `opbyop analyze` does (compile, the simulated device, golden on XLA:CPU: a host mesh
for the sharded model), each part's median and mean per op; the TTNN collectives the mesh programs
hold are counted, and the simulator's wall time in them (DeviceRun.collective_seconds) is summed.
Each mesh case is held against its baseline: mesh op / (one-chip op + the mesh op's collectives),
by mean and by median, for the whole analysis and for the device alone. `--rounds N` runs every case N times, interleaved (the order
reversed every other round), so that a load drift on a shared machine falls on all cases alike.
`--compile-only` leaves the device and golden out.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common import Figures, median_ms, timed

from opbyop.compiler.targets import BOARDS, target_for

ONE_CHIP = "-one-chip"  # the baseline's name: the mesh model's name and this

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
    statuses: Counter = field(default_factory=Counter)  # of the first round
    seen: Counter = field(default_factory=Counter)  # TTNN collectives in the compiled programs
    ok: int = 0  # ops that compiled to a flatbuffer
    first_failure: str = ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", nargs="*", default=["llama-tp-1x2:p300", "cnn-dp-1x2:p300"],
                        help="MODEL:CHIP[:MESH] on a mesh")
    parser.add_argument("--compile-only", action="store_true", help="no device run, no golden")
    parser.add_argument("--rounds", type=int, default=1, help="every case this many times, interleaved")
    args = parser.parse_args()
    baselines = {case: _baseline(case) for case in args.mesh}
    cases = [*dict.fromkeys(baselines.values()), *args.mesh]
    chips = max(target_for(*_chip_mesh(c)).chips for c in cases)
    from opbyop.jaxenv import prepare_jax

    prepare_jax(host_devices=chips)  # sharded ops' upstream values run on a host mesh this large
    from opbyop.config import AnalysisSettings, load_zoo

    settings = AnalysisSettings(run_device=False, run_golden=False) if args.compile_only else AnalysisSettings()
    figures = Figures(f"op by op on one chip and on meshes ({'compile only' if args.compile_only else 'analyze'}, "
                      "warm worker; per unique op, median ms)",
                      ["model", "chip", "mesh", "ops", "unique", "split s", "op ms", "compile ms", "device ms",
                       "golden ms", "collectives ms", "analyze s total", "flatbuffer", "statuses", "TTNN collectives",
                       "first failure"])
    zoo = _with_baselines(load_zoo(), args.mesh)
    prepared = {case: _prepare(case, zoo) for case in cases}
    measured = {case: CaseFigures(case.split(":")[0]) for case in cases}
    for round_ in range(args.rounds):  # every case once per round, in turn reversed: load drifts hit all alike
        for case in cases if round_ % 2 == 0 else cases[::-1]:
            if not prepared[case][1].errors:
                _analyze(case, prepared[case][1], settings, measured[case], first_round=round_ == 0,
                         host_devices=chips)
    for case in cases:
        split_s, got = prepared[case]
        model = case.split(":")[0]
        chip, mesh = _chip_mesh(case)
        target = target_for(chip, mesh)
        if got.errors:
            figures.add(model, chip, target.mesh_text, "", "", "", "", "", "", "", "", "", "", got.errors[model][:60])
            continue
        m = measured[case]
        figures.add(model, chip, target.mesh_text, len(got.records), len(got.unique), split_s,
                    median_ms(m.totals), median_ms(m.compiles), _or_dash(m.devices), _or_dash(m.goldens),
                    _or_dash(m.collectives), sum(m.totals) / args.rounds, f"{m.ok}/{len(got.unique)}",
                    ", ".join(f"{k} {v}" for k, v in m.statuses.most_common()),
                    ", ".join(f"{k.removeprefix('ttnn.')} {v}" for k, v in m.seen.most_common()) or "-",
                    m.first_failure or "-")
    figures.show()
    print("op ms: median over the unique ops of the worker's whole analysis of one op; compile/device/golden ms: "
          "each part's median as the worker measured it; collectives ms: the simulator's time in collectives "
          "(median); split s: export, propagation, split")
    show_goal(measured, baselines)


def _prepare(case: str, zoo: object) -> tuple[float, object]:
    """(split seconds, the model split for its target)."""
    from opbyop.pipeline import prepare

    chip, mesh = _chip_mesh(case)
    with timed() as split_time:
        prepared = prepare([case.split(":")[0]], zoo, target=target_for(chip, mesh))
    return split_time.wall, prepared


def _analyze(case: str, prepared: object, settings: object, got: CaseFigures, first_round: bool,
             host_devices: int) -> None:
    """Every unique op of the case in a warm op worker of a fresh home (no case finds another's XLA
    executables or artifacts on disk); the first round also counts statuses and collectives."""
    from opbyop.compiler.system_desc import resolve
    from opbyop.worker.process import OpWorker
    from opbyop.workspace import Workspace

    chip, mesh = _chip_mesh(case)
    target = target_for(chip, mesh)
    with tempfile.TemporaryDirectory() as home, OpWorker(resolve(chip).path, Path(home), chip=chip,
                                                         name=f"bench-{chip}", host_devices=host_devices) as worker:
        artifacts = Workspace(Path(home)).artifacts
        for op in prepared.unique:
            result = worker.analyze(op, settings.model_copy(update={"mesh": target.mesh_text}), timeout=300)
            got.totals.append(result.seconds)
            if result.device is not None:
                got.devices.append(result.device.seconds)
                got.collectives.append(result.device.collective_seconds)
            if result.golden is not None:
                got.goldens.append(result.golden.seconds)
            if result.compile is not None:
                got.compiles.append(result.compile.seconds)
            if not first_round:
                continue
            got.statuses[result.status.value] += 1
            if result.status.value != "success" and not got.first_failure:
                got.first_failure = f"{result.status.value}: {result.message}"
            if result.compile is not None and result.compile.ok:
                got.ok += 1
                got.seen.update(COLLECTIVE.findall(artifacts.read_text(result.compile.artifacts["ttnn_runtime"])))


def _baseline(case: str) -> str:
    """MODEL:CHIP[:MESH] -> MODEL-one-chip:ONE (the model without its plan, on one chip of the board's
    architecture)."""
    model, chip = case.split(":")[:2]
    arch = BOARDS[chip].arch
    one = next(name for name, board in BOARDS.items() if board.chips == 1 and board.arch == arch)
    return f"{model}{ONE_CHIP}:{one}"


def _with_baselines(zoo: object, meshes: list[str]) -> object:
    """The zoo and, for each mesh case's model, the same entry without its sharding plan."""
    extra = []
    for name in dict.fromkeys(case.split(":")[0] for case in meshes):
        entry = zoo.get(name)
        extra.append(entry.model_copy(update={"name": name + ONE_CHIP, "sharding": None,
                                              "tags": [t for t in entry.tags if t != "multichip"]}))
    return zoo.model_copy(update={"models": [*zoo.models, *extra]})


def show_goal(measured: dict[str, CaseFigures], baselines: dict[str, str]) -> None:
    """Each mesh case against its one-chip baseline plus its own collectives' simulation."""
    goal = Figures("the goal: mesh op <= one-chip op + the mesh op's collectives (ratio <= 1.0 meets it)",
                   ["mesh case", "one-chip case", "op ms mesh (mean)", "op ms one chip (mean)",
                    "collectives ms (mean)", "ratio by mean", "ratio by median", "device ratio by mean",
                    "device ratio by median", "compile +ms", "golden +ms", "device +ms", "rest +ms"])
    for case, base_case in baselines.items():
        mesh, base = measured.get(case), measured.get(base_case)
        if mesh is None or base is None or not mesh.totals or not base.totals:
            goal.add(case, base_case or "-", "", "", "", "no baseline measured", "", "", "", "", "", "", "")
            continue
        coll_mean, coll_median = _mean(mesh.collectives), _median(mesh.collectives)
        devices = bool(mesh.devices and base.devices)
        extra = [m - b for m, b in zip(_parts(mesh), _parts(base))]
        goal.add(case, base_case, 1000 * _mean(mesh.totals), 1000 * _mean(base.totals), 1000 * coll_mean,
                 _mean(mesh.totals) / (_mean(base.totals) + coll_mean),
                 _median(mesh.totals) / (_median(base.totals) + coll_median),
                 _mean(mesh.devices) / (_mean(base.devices) + coll_mean) if devices else "-",
                 _median(mesh.devices) / (_median(base.devices) + coll_median) if devices else "-",
                 *(1000 * e for e in extra))
    goal.show()
    print("+ms: the mesh case's mean part per op less its baseline's: compile is tt-mlir's (for the mesh's chips), "
          "golden XLA:CPU's on a host mesh (its SPMD partitioning and one execution per host device), device the "
          "simulated mesh (with its collectives), rest the worker's own handling of the op")


def _parts(case: CaseFigures) -> list[float]:
    """Mean seconds per op: compile, golden, device, and the rest of the op's analysis."""
    parts = [_mean(case.compiles), _mean(case.goldens), _mean(case.devices)]
    return [*parts, _mean(case.totals) - sum(parts)]


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
