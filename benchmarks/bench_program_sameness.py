"""How often a new compiler build emits the same program for an op, and whether the device's verdict
could then be kept from the build before.

    PYTHONPATH=benchmarks .venv/bin/python benchmarks/bench_program_sameness.py
        [--before jax-tt-plugin==0.1.2] [--after installed] [--models mlp cnn ...] [--workers 2]
        [--workspace <the workspace an earlier run printed>]

One `opbyop analyze MODELS --compiler BEFORE --compiler AFTER --no-whole --no-reuse` in an empty
workspace (the machine's caches warm), then, per unique op compiled by both builds:
- its flatbuffer byte for byte, and its TTNN module (the program the flatbuffer is made from) as
  text, and as text without the system descriptor the build writes into it (its `#system_desc` line,
  its figures differ from build to build) and without locations;
- where the TTNN programs are the same: whether the two device runs gave the same verdict (status,
  cycles, peak L1, pcc, max error): the evidence a device verdict could be kept by its program;
- the program the device model runs (`ttnn_runtime`) with its descriptor as the model reads it
  (opbyop.device.arch.DeviceSpec: grid, L1 and its reserved base, DRAM), locations kept: what a kept
  device verdict would have to be keyed by. The chip figures that differ between the builds are
  printed.
Printed: the counts, and a few ops whose programs differ, with the first differing line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opbyop.device.arch import DeviceSpec

DESC = re.compile(r"^#system_desc = #ttcore\.system_desc<.*$", re.M)  # the descriptor's alias: one line
LOC = re.compile(r"\s*loc\([^\n]*\)$|^#loc.*$", re.M)
VERDICT = ("status", "cycles", "peak_l1_bytes", "pcc", "max_abs_error")


def analyze(home: Path, models: list[str], before: str, after: str, workers: int) -> float:
    env = {**os.environ, "OPBYOP_HOME": str(home), "COLUMNS": "200"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "analyze", *models, "--compiler", before,
                           "--compiler", after, "--no-whole", "--no-reuse", "--workers", str(workers)],
                          env=env, cwd=home, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        print(done.stdout[-3000:], done.stderr[-3000:])
    return time.monotonic() - start


def rows(home: Path, query: str) -> list[dict]:
    env = {**os.environ, "OPBYOP_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "opbyop.cli.main", "sql", query, "--format", "json"], env=env,
                          cwd=home, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def program(home: Path, digest: str | None) -> str | None:
    """A TTNN module from the workspace's artifacts, without its system descriptor and locations."""
    if not digest:
        return None
    found = list((home / "artifacts" / digest[:2]).glob(f"{digest}.*"))
    if not found:
        return None
    return LOC.sub("", DESC.sub("#system_desc = ...", found[0].read_text(errors="replace")))


def device_program(home: Path, digest: str | None) -> tuple[str, dict] | None:
    """The runtime TTNN module as the device model reads it: its descriptor line replaced by the
    figures the model takes from it (locations kept: its messages name them); and those figures."""
    if not digest:
        return None
    found = list((home / "artifacts" / digest[:2]).glob(f"{digest}.*"))
    if not found:
        return None
    text = found[0].read_text(errors="replace")
    spec = DeviceSpec.from_system_desc(text)
    return DESC.sub(spec.model_dump_json(), text), spec.model_dump()


def first_difference(a: str, b: str) -> str:
    for line_a, line_b in zip(a.splitlines(), b.splitlines()):
        if line_a != line_b:
            return f"{line_a.strip()[:110]}  |  {line_b.strip()[:110]}"
    return "(one is longer)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="jax-tt-plugin==0.1.2")
    parser.add_argument("--after", default="installed")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "gpt2", "llama", "vit", "bert-small"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workspace", type=Path, help="count again in the workspace of an earlier run (no analysis)")
    args = parser.parse_args()
    if args.workspace is not None:
        home, wall = args.workspace, 0.0
    else:
        home = Path(tempfile.mkdtemp(prefix="bench-sameness-"))
        wall = analyze(home, args.models, args.before, args.after, args.workers)
    runs = rows(home, "SELECT run_id, compiler_version FROM runs ORDER BY started_at")
    if len(runs) != 2:
        sys.exit(f"expected two runs in {home}, found {runs}")
    (first, _), (second, _) = [(r["run_id"], r["compiler_version"]) for r in runs]
    pick = ", ".join(f"{{side}}.{c} AS {{side}}_{c}" for c in VERDICT)
    both = rows(home, f"""
        SELECT a.signature, a.op_name, a.artifacts.flatbuffer AS a_fb, b.artifacts.flatbuffer AS b_fb,
               a.artifacts.ttnn AS a_ttnn, b.artifacts.ttnn AS b_ttnn,
               a.artifacts.ttnn_runtime AS a_run, b.artifacts.ttnn_runtime AS b_run, {pick.format(side='a')}, {pick.format(side='b')}
        FROM results a JOIN results b USING (signature)
        WHERE a.run_id = '{first}' AND b.run_id = '{second}'
          AND a.artifacts.flatbuffer IS NOT NULL AND b.artifacts.flatbuffer IS NOT NULL""")
    same_bytes = sum(r["a_fb"] == r["b_fb"] for r in both)
    same_text = sum(r["a_ttnn"] == r["b_ttnn"] for r in both)
    same_program, same_verdict, differing = 0, 0, []
    same_device, chip_figures = 0, {}
    for r in both:
        a_run, b_run = device_program(home, r["a_run"]), device_program(home, r["b_run"])
        if a_run is not None and b_run is not None:
            same_device += a_run[0] == b_run[0]
            chip_figures.update({k: (v, b_run[1][k]) for k, v in a_run[1].items() if v != b_run[1][k]})
        a, b = program(home, r["a_ttnn"]), program(home, r["b_ttnn"])
        if a is not None and a == b:
            same_program += 1
            same_verdict += all(r[f"a_{c}"] == r[f"b_{c}"] for c in VERDICT)
        elif a is not None and b is not None:
            differing.append((r["op_name"], r["signature"][:10], first_difference(a, b)))
    print(f"{args.before} then {args.after}: {' '.join(args.models)}, " +
          (f"analysed in {wall:.0f} s (both builds)" if args.workspace is None else f"counted again in {home}"))
    print(f"unique ops compiled to a flatbuffer by both builds: {len(both)}")
    print(f"  flatbuffer byte-identical:                      {same_bytes}")
    print(f"  TTNN module text identical:                      {same_text}")
    print(f"  TTNN program identical without descriptor, locs: {same_program}")
    print(f"    of those, the same device verdict ({', '.join(VERDICT)}): {same_verdict}")
    print(f"  runtime program identical as the device model reads it (descriptor figures, locs): {same_device}")
    print(f"    chip figures the device model reads that differ (before, after): {chip_figures or 'none'}")
    for name, signature, line in differing[:8]:
        print(f"  differs: {name} {signature}: {line}")
    print(f"workspace: {home}")


if __name__ == "__main__":
    main()
