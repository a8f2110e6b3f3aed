"""The split is lossless over the whole small zoo: each model's single ops, replayed in program order
on XLA:CPU, against the framework's eager output.

    cd benchmarks && PYTHONPATH=..:. ../.venv/bin/python bench_lossless.py [--models resnet50 bert-base ...]

Per model: its ops, the replay's worst error (max |replayed - eager| over the output's max |eager|),
and its time. Baseline in the same run: the whole exported module run once on XLA:CPU against the same
eager output (what export alone costs in accuracy). Each model runs in a process of its own, with as
many XLA:CPU devices as its mesh (fixed when JAX starts). The tests check one model of each kind.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from common import Figures

from opbyop.config import load_zoo


def measure(model: str) -> dict:
    """Runs in the child: the replay's and the whole module's errors and times of one model."""
    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.frontends.loader import load_model
    from opbyop.golden.replay import replay_error, worst_error
    from opbyop.golden.xla_cpu import XlaCpu
    from opbyop.ir.split import split_module

    graph, golden = load_model(model), XlaCpu()
    start = time.perf_counter()
    whole = worst_error(golden.run(graph.module_text, graph.argument_values), graph.reference_outputs)
    whole_s = time.perf_counter() - start
    start = time.perf_counter()
    split = split_module(graph.module_text, graph.name)
    replayed = replay_error(graph, split, golden)
    return {"model": model, "ops": len(split.ops), "whole": whole,
            "whole_s": whole_s, "replay": replayed, "replay_s": time.perf_counter() - start}


def in_child(model: str, devices: int) -> dict:
    env = {**os.environ, "OPBYOP_HOST_DEVICES": str(devices)}
    proc = subprocess.run([sys.executable, __file__, "--one", model], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"model": model, "error": proc.stderr.strip().splitlines()[-1][:200]}
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    zoo = load_zoo()
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=[m.name for m in zoo.small()])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    figures = Figures("the split replayed against eager (baseline: the whole module on XLA:CPU)",
                      ["model", "devices", "ops", "whole module error", "replay error", "whole s", "replay s"])
    for model in args.models:
        sharding = zoo.get(model).sharding
        devices = sharding.shape()[0] * sharding.shape()[1] if sharding else 1
        row = in_child(model, devices)
        if "error" in row:
            figures.add(model, devices, "", "", row["error"], "", "")
            continue
        figures.add(model, devices, row["ops"], row["whole"], row["replay"], row["whole_s"], row["replay_s"])
    figures.show()


if __name__ == "__main__":
    main()
