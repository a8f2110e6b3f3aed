"""Op by op at real LLM sizes, memory and time per model size in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_real_size.py [--models llama-3.1-8b ...]
        [--layers N] [--baseline llama-3.2-1b --baseline-path CHECKOUT] [--chip p150]

Each model is a llama-style decoder at its published dimensions (benchmarks/real_size_models.py),
lowered from JAX with jax.ShapeDtypeStruct arguments: no weight exists anywhere. Its module is split
and deduplicated here, and every unique op goes through compile, the simulated device and XLA:CPU in
one op worker (the analysis path; a .mlir file through the CLI still draws values for @main's
arguments). Peak RSS is of this process and all its children (the op worker), sampled with psutil.
`--baseline` runs the same ops with another checkout's code (`--baseline-path`) in the worker (PYTHONPATH).
Goals: llama-3.1-8B <= 5 min and <= 6 GB; llama-3.1-70B <= 8 min and <= 10 GB.

`--cli MODEL[:CHIP][@LAYERS] ...` measures as a user would instead: `opbyop run MODEL --no-whole` on the
zoo's meta-device model, in a fresh OPBYOP_HOME, its peak RSS summed over the command and all its
children (sampled every 0.5 s), with each process's own peak and the share of each at the moment of
the peak, and the unique ops by status; `@LAYERS` builds the model LAYERS decoder layers deep (a copy
of configs/ whose zoo entry says so: the layers after the first few repeat their unique ops);
`--cli-baseline MODEL ...` runs the same command with `--baseline-path`'s code in the same run (each
command in its fresh home as working directory, its code its checkout's on PYTHONPATH); the CPU
seconds of each kind of process (the command, the op worker's child) are read at the last sample.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml
from common import Figures, PeakMemory

from real_size_models import CONFIGS, stablehlo

from opbyop.jaxenv import prepare_jax

prepare_jax()

from opbyop.compiler.system_desc import resolve  # noqa: E402
from opbyop.config import AnalysisSettings, config_dir, load_thresholds, load_zoo  # noqa: E402
from opbyop.ir.dedupe import dedupe  # noqa: E402
from opbyop.ir.split import split_module  # noqa: E402
from opbyop.worker.process import OpWorker  # noqa: E402


def peak_rss() -> PeakMemory:
    """The largest summed RSS of this process and its descendants, sampled every 50 ms."""
    return PeakMemory(os.getpid(), every=0.05)


def role(p: psutil.Process) -> str:
    """What a process of an `opbyop run` is: the command, its op worker's child, or a side child."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return "?"
    if "opbyop.worker.child" not in cmd:
        return "cli" if any(c.endswith("opbyop") or "opbyop.cli" in c for c in cmd) else Path(cmd[0]).name if cmd else "?"
    env_name = ""
    try:
        env_name = p.environ().get("TTXLA_LOGGER_LEVEL", "") and "verbose child"
    except psutil.Error:
        pass
    return env_name or "op worker child"


@dataclass
class CliFigures:
    name: str
    wall_s: float = 0.0
    peak_rss: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)  # each role's RSS at the moment of the peak
    per_role_peak: dict[str, int] = field(default_factory=dict)
    exit_code: int = 0
    tail: str = ""
    statuses: dict[str, int] = field(default_factory=dict)  # unique ops by status, from the command's table
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds (user + system) by role, last sample


def configs_with_layers(model: str, layers: int, folder: Path) -> Path:
    """A copy of configs/ in `folder` whose zoo entry `model` is built `layers` decoder layers deep."""
    target = folder / "configs"
    target.mkdir()
    for item in config_dir().iterdir():
        if item.name != "models.yaml":
            (target / item.name).symlink_to(item)
    zoo = load_zoo()
    entry = zoo.get(model)
    entry.kwargs = {**entry.kwargs, "layers": layers}
    (target / "models.yaml").write_text(yaml.safe_dump(zoo.model_dump(mode="json", exclude_none=True), sort_keys=False))
    return target


def unique_statuses(stdout: str) -> dict[str, int]:
    """The unique ops by status, counted from the rows of `opbyop run`'s table (its status column)."""
    statuses: dict[str, int] = {}
    for line in stdout.splitlines():
        if "summary (occurrences)" in line:  # the per-op table ends; the tables after it count otherwise
            break
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 6 and cells[2].isdigit():  # op, occurrences, inputs, depth, status, ...
            statuses[cells[5]] = statuses.get(cells[5], 0) + 1
    return statuses


def run_cli(case: str, env: dict[str, str], label: str, interval: float = 0.5,
            limit_s: float | None = None) -> CliFigures:
    """`opbyop run MODEL --no-whole [--chip CHIP]` for `case` MODEL[:CHIP][@LAYERS] in a fresh home, its
    process tree's RSS sampled every `interval` s; past `limit_s` seconds the tree is killed (exit -9)."""
    home = tempfile.mkdtemp(prefix="bench-cli-home-")
    figures = CliFigures(f"{case}{label}")
    case, _, layers = case.partition("@")
    model, _, chip = case.partition(":")
    if layers:
        env = {**env, "OPBYOP_CONFIG_DIR": str(configs_with_layers(model, int(layers), Path(home)))}
    cmd = [sys.executable, "-m", "opbyop.cli.main", "run", model, "--no-whole", "--full",
           *(["--chip", chip] if chip else [])]
    started = time.perf_counter()
    with open(Path(home) / "stdout.txt", "w+") as out:
        # run in the fresh home: `python -m` puts the working directory first on sys.path, so the code is
        # PYTHONPATH's checkout's, not that of the directory the benchmark was started from
        proc = subprocess.Popen(cmd, env={**os.environ, **env, "OPBYOP_HOME": home, "COLUMNS": "400"}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=home)
        top = psutil.Process(proc.pid)
        roles: dict[int, str] = {}
        cpu: dict[int, float] = {}  # each process's CPU seconds at its last sample
        while proc.poll() is None:
            sample: dict[str, int] = {}
            try:
                tree = [top, *top.children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                r = roles.get(p.pid) or role(p)
                if r != "?":  # a process just started may show no command line yet: asked again next time
                    roles[p.pid] = r
                try:
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
                except psutil.Error:
                    pass
                sample[r] = sample.get(r, 0) + rss
                figures.per_role_peak[r] = max(figures.per_role_peak.get(r, 0), rss)
            total = sum(sample.values())
            if total > figures.peak_rss:
                figures.peak_rss, figures.at_peak = total, sample
            if limit_s is not None and time.perf_counter() - started > limit_s:
                for p in reversed(tree):  # the children first, then the command
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
            time.sleep(interval)
        figures.wall_s = time.perf_counter() - started
        figures.exit_code = proc.returncode
        for pid, seconds in cpu.items():
            figures.cpu_s[roles.get(pid, "?")] = figures.cpu_s.get(roles.get(pid, "?"), 0.0) + seconds
        out.seek(0)
        text = out.read()
        figures.tail = " | ".join(line.strip() for line in text.splitlines()[-3:])[:200]
        figures.statuses = unique_statuses(text)
    print(f"{figures.name}: the command's output is {Path(home) / 'stdout.txt'}", flush=True)
    return figures


def cli_main(models: list[str], baseline: list[str], baseline_path: str, limit_s: float | None) -> None:
    this = str(Path(__file__).resolve().parent.parent)
    runs = [run_cli(m, {"PYTHONPATH": this}, "", limit_s=limit_s) for m in models]
    runs += [run_cli(m, {"PYTHONPATH": baseline_path}, f" [code of {baseline_path}]", limit_s=limit_s)
             for m in baseline]
    table = Figures("`opbyop run MODEL --no-whole` (zoo meta-device model): wall time and peak RSS of all processes",
                    ["model", "exit", "unique ops by status", "wall s", "CPU s by process", "peak RSS GB (all)",
                     "at the peak, GB by process", "each process's own peak GB", "last lines"])
    for r in runs:
        table.add(r.name, r.exit_code, " ".join(f"{k}={v}" for k, v in sorted(r.statuses.items())),
                  f"{r.wall_s:.0f}", " ".join(f"{k}={v:.0f}" for k, v in sorted(r.cpu_s.items())),
                  f"{r.peak_rss / 1e9:.2f}",
                  " ".join(f"{k}={v / 1e9:.2f}" for k, v in sorted(r.at_peak.items())),
                  " ".join(f"{k}={v / 1e9:.2f}" for k, v in sorted(r.per_role_peak.items())), r.tail)
    table.show()


@dataclass
class OpFigure:
    op: str
    status: str
    seconds: float
    peak_rss: int


@dataclass
class ModelFigures:
    name: str
    parameters: int = 0
    ops: int = 0
    unique: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    split_s: float = 0.0
    wall_s: float = 0.0
    peak_rss: int = 0
    per_op: list[OpFigure] = field(default_factory=list)
    error: str = ""


def run_model(name: str, layers: int | None, chip, rss: PeakMemory, workspace: Path, env: dict[str, str] | None,
              label: str) -> ModelFigures:
    config = CONFIGS[name]
    layers = config.layers if layers is None else layers
    figures = ModelFigures(f"{name} ({layers} layers){label}", parameters=config.parameters())
    rss.reset()
    started = time.perf_counter()
    try:
        split = split_module(stablehlo(config, layers), name)
        unique = dedupe(split.ops)
        figures.ops, figures.unique = len(split.ops), len(unique)
        figures.split_s = time.perf_counter() - started
        settings = AnalysisSettings(thresholds=load_thresholds())
        with OpWorker(chip.path, workspace, chip=chip.chip, name=f"bench-{name}", env=env) as worker:
            for op in unique:
                before = rss.peak
                rss.peak = rss.total()
                t = time.perf_counter()
                result = worker.analyze(op, settings, timeout=600)
                shapes = ", ".join(str(i) for i in op.inputs)
                figures.per_op.append(OpFigure(f"{op.op_name} ({shapes})", result.status.value,
                                               time.perf_counter() - t, rss.peak))
                rss.peak = max(before, rss.peak)
                figures.statuses[result.status.value] = figures.statuses.get(result.status.value, 0) + 1
    except Exception as e:  # a model that breaks still leaves the others' figures
        figures.error = f"{type(e).__name__}: {e}"[:200]
    figures.wall_s = time.perf_counter() - started
    figures.peak_rss = rss.peak
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b"])
    parser.add_argument("--layers", type=int, default=None, help="decoder layers per model (default: the model's own)")
    parser.add_argument("--baseline", nargs="*", default=[], help="models to run again with --baseline-path's code")
    parser.add_argument("--baseline-path", default=None, help="another checkout of opbyop, for --baseline and --cli-baseline")
    parser.add_argument("--chip", default="p150")
    parser.add_argument("--cli", nargs="*", default=None, help="zoo models (MODEL, MODEL:CHIP, MODEL@LAYERS) to measure through `opbyop run --no-whole`")
    parser.add_argument("--cli-baseline", nargs="*", default=[], help="zoo models to measure again with --baseline-path's code")
    parser.add_argument("--cli-limit", type=float, default=None, help="seconds one --cli command may take before it is killed")
    args = parser.parse_args()
    if (args.baseline or args.cli_baseline) and not args.baseline_path:
        parser.error("--baseline and --cli-baseline need --baseline-path (another checkout of opbyop)")
    if args.cli is not None:
        cli_main(args.cli, args.cli_baseline, args.baseline_path, args.cli_limit)
        return

    chip = resolve(args.chip)
    workspace = Path(tempfile.mkdtemp(prefix="bench-real-size-"))
    runs: list[ModelFigures] = []
    with peak_rss() as rss:
        for name in args.models:
            runs.append(run_model(name, args.layers, chip, rss, workspace, None, ""))
        for name in args.baseline:
            env = {"PYTHONPATH": args.baseline_path}
            runs.append(run_model(name, args.layers, chip, rss, workspace, env, f" [code of {args.baseline_path}]"))

    table = Figures("real-size models op by op (compile + device + golden, one op worker)",
                    ["model", "parameters", "weights bf16 GB", "ops", "unique", "statuses", "split s", "wall s",
                     "peak RSS GB (all processes)", "error"])
    for r in runs:
        table.add(r.name, f"{r.parameters / 1e9:.2f}B", f"{2 * r.parameters / 1e9:.1f}", r.ops, r.unique,
                  " ".join(f"{k}={v}" for k, v in sorted(r.statuses.items())), f"{r.split_s:.1f}", f"{r.wall_s:.1f}",
                  f"{r.peak_rss / 1e9:.2f}", r.error)
    table.show()
    for r in runs:
        slow = Figures(f"five slowest ops of {r.name}", ["op", "status", "seconds", "peak RSS GB during the op"])
        for f in sorted(r.per_op, key=lambda f: -f.seconds)[:5]:
            slow.add(f.op[:110], f.status, f"{f.seconds:.1f}", f"{f.peak_rss / 1e9:.2f}")
        slow.show()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
