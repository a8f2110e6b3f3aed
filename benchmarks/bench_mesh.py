"""The cost of op by op on a mesh: per unique op, a model on one chip against its sharded variant on a
mesh, side by side in one run (goal: no more per unique op on the mesh than on one chip, plus the
collectives' own simulation once the simulator is a mesh of chips).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_mesh.py [--single llama:p150] [--mesh llama-tp-1x2:p300]

Split (with Shardy's propagation on the sharded model) is timed, then every unique op analysed in a
warm worker as `opbyop analyze` does (compile, the simulated device, golden on XLA:CPU: a host mesh
for the sharded model), each part's median per op; the TTNN collectives the mesh programs hold are
counted. `--compile-only` leaves the device and golden out.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from common import Figures, median_ms, timed

from opbyop.compiler.targets import target_for

COLLECTIVE = re.compile(r'"(ttnn\.(?:all_reduce|all_gather|reduce_scatter|collective_permute|all_to_all|'
                        r'point_to_point|mesh_shard|distribute_tensor|aggregate_tensor)\w*)"')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", default="llama:p150", help="MODEL:CHIP on one chip (the baseline)")
    parser.add_argument("--mesh", nargs="*", default=["llama-tp-1x2:p300"], help="MODEL:CHIP[:MESH] on a mesh")
    parser.add_argument("--compile-only", action="store_true", help="no device run, no golden")
    args = parser.parse_args()
    cases = [args.single, *args.mesh]
    chips = max(target_for(*_chip_mesh(c)).chips for c in cases)
    os.environ["OPBYOP_HOST_DEVICES"] = str(chips)  # before JAX starts (in this process and the workers)

    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.compiler.system_desc import resolve
    from opbyop.config import AnalysisSettings, load_zoo
    from opbyop.pipeline import prepare
    from opbyop.worker.process import OpWorker

    settings = AnalysisSettings(run_device=False, run_golden=False) if args.compile_only else AnalysisSettings()
    figures = Figures(f"op by op on one chip and on meshes ({'compile only' if args.compile_only else 'analyze'}, "
                      "warm worker; per unique op, median ms)",
                      ["model", "chip", "mesh", "ops", "unique", "split s", "op ms", "compile ms", "device ms",
                       "golden ms", "analyze s total", "flatbuffer", "statuses", "TTNN collectives"])
    with tempfile.TemporaryDirectory() as home:
        zoo = load_zoo()
        for case in cases:
            model = case.split(":")[0]
            chip, mesh = _chip_mesh(case)
            target = target_for(chip, mesh)
            with timed() as split_time:
                prepared = prepare([model], zoo, target=target)
            if prepared.errors:
                figures.add(model, chip, target.mesh_text, "", "", "", "", "", "", prepared.errors[model][:60])
                continue
            desc = resolve(chip)
            seconds, ok, collectives = [], 0, Counter()
            totals, devices, goldens, statuses = [], [], [], Counter()
            with OpWorker(desc.path, Path(home), chip=chip, name=f"bench-{chip}") as worker:
                from opbyop.workspace import Workspace

                artifacts = Workspace(Path(home)).artifacts
                for op in prepared.unique:
                    result = worker.analyze(op, settings.model_copy(update={"mesh": target.mesh_text}), timeout=300)
                    totals.append(result.seconds)
                    statuses[result.status.value] += 1
                    if result.device is not None:
                        devices.append(result.device.seconds)
                    if result.golden is not None:
                        goldens.append(result.golden.seconds)
                    if result.compile is not None:
                        seconds.append(result.compile.seconds)
                        if result.compile.ok:
                            ok += 1
                            program = artifacts.read_text(result.compile.artifacts["ttnn_runtime"])
                            collectives.update(COLLECTIVE.findall(program))
            figures.add(model, chip, target.mesh_text, len(prepared.records), len(prepared.unique), split_time.wall,
                        median_ms(totals), median_ms(seconds), median_ms(devices) if devices else "-",
                        median_ms(goldens) if goldens else "-", sum(totals), f"{ok}/{len(prepared.unique)}",
                        ", ".join(f"{k} {v}" for k, v in statuses.most_common()),
                        ", ".join(f"{k.removeprefix('ttnn.')} {v}" for k, v in collectives.most_common()) or "-")
    figures.show()
    print("op ms: median over the unique ops of the worker's whole analysis of one op; compile/device/golden ms: "
          "each part's median as the worker measured it; split s: export, propagation, split")


def _chip_mesh(case: str) -> tuple[str, str | None]:
    parts = case.split(":")
    return parts[1], (parts[2] if len(parts) > 2 else None)


if __name__ == "__main__":
    main()
