"""Mixtures of experts at real size built the user's way, analysed op by op.

    PYTHONPATH=.:benchmarks .venv/bin/python benchmarks/bench_user_moe.py [--models qwen3-30b-a3b ...]
        [--layers 2] [--timeout 120]
    PYTHONPATH=.:benchmarks .venv/bin/python benchmarks/bench_user_moe.py --kernel 16 32 [--baseline-path CHECKOUT]
    PYTHONPATH=.:benchmarks .venv/bin/python benchmarks/bench_user_moe.py --gather 7340032 [--baseline-path CHECKOUT]

Each model is what a user writes: transformers' own class built from the published configuration
(config.json's numbers, hard-coded here, `layers` decoder layers) under `torch.device("meta")`, bf16,
128 tokens, its experts left in transformers' default form (grouped_mm: one op holds a layer's
experts), never opbyop's factories. `bench_user_moe:qwen3_30b_a3b` and its kin are the factories
`opbyop run` takes. Each runs as `opbyop run FACTORY --no-whole` in a fresh OPBYOP_HOME; printed per
model: wall time, the peak memory of the command and all its children (sampled every 0.5 s) and
unique ops by status. Goals: every op a verdict, each model <= 10 minutes and <= 8 GB.

--kernel E ...: the device model's matmul alone (formats.fidelity_matmul, HiFi4, fp32 accumulation, as
tt-mlir compiles it) on Qwen3-30B-A3B's grouped gate/up projection with E experts ((E, 1024, 2048) by
(E, 2048, 1536) bf16: 128 tokens x top 8 rows against every expert), its wall time and the peak of
numpy's allocations; beside it the same in another checkout (--baseline-path), each in its own process.
--gather N ...: the device model's ttnn.rows_gather alone in its column form, N index vectors into an
(8, 28672) table (Mixtral-8x7B's grouped gather holds 256 x 28672 = 7,340,032), the same way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import transformers

from common import ROOT, measured, sql

SEQUENCE = 128
# Outcomes that are no verdict on the op: opbyop's or the infrastructure's (records.Status)
NO_VERDICT = {"analyzer_error", "infra_error", "not_simulated", "simulator_error", "simulator_limit"}
LAYERS = int(os.environ.get("BENCH_USER_MOE_LAYERS", "2"))  # the factories take no arguments: the depth rides here


@dataclass(frozen=True)
class Published:
    """A model's transformers classes and its config.json numbers."""

    config_class: str
    model_class: str
    config: dict[str, Any]


MODELS: dict[str, Published] = {
    "qwen3-30b-a3b": Published("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, max_position_embeddings=40960, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "mixtral-8x7b": Published("MixtralConfig", "MixtralForCausalLM", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768, rms_norm_eps=1e-5,
        tie_word_embeddings=False, sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    "deepseek-v2-lite": Published("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        vocab_size=102400, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2, n_routed_experts=64,
        num_experts_per_tok=6, first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, topk_method="greedy", n_group=1, topk_group=1,
        routed_scaling_factor=1.0, norm_topk_prob=False, max_position_embeddings=163840, rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, beta_fast=32.0, beta_slow=1.0,
                             mscale=0.707, mscale_all_dim=0.707, original_max_position_embeddings=4096))),
    "gpt-oss-20b": Published("GptOssConfig", "GptOssForCausalLM", dict(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_attention_heads=64, num_key_value_heads=8,
        head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128, swiglu_limit=7.0,
        attention_bias=True, max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                             original_max_position_embeddings=4096, truncate=False))),
}


def build(name: str, layers: int = LAYERS) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """(the model on the meta device in bf16, [token ids]) as a user builds it from transformers."""
    published = MODELS[name]
    # use_cache=False: the forward a user exports returns logits, not a DynamicCache torch.export cannot flatten
    config = getattr(transformers, published.config_class)(**published.config, num_hidden_layers=layers,
                                                           use_cache=False)
    with torch.device("meta"):
        model = getattr(transformers, published.model_class)(config).to(torch.bfloat16)
    ids = torch.randint(0, published.config["vocab_size"], (1, SEQUENCE), generator=torch.Generator().manual_seed(0))
    return model.eval(), [ids]


def _factory(name: str) -> Callable[[], tuple[torch.nn.Module, list[torch.Tensor]]]:
    def factory() -> tuple[torch.nn.Module, list[torch.Tensor]]:
        return build(name)
    factory.__name__ = name.replace("-", "_").replace(".", "_")
    return factory


qwen3_30b_a3b = _factory("qwen3-30b-a3b")
mixtral_8x7b = _factory("mixtral-8x7b")
deepseek_v2_lite = _factory("deepseek-v2-lite")
gpt_oss_20b = _factory("gpt-oss-20b")


@dataclass(frozen=True)
class Outcome:
    """One model's run: its wall time, peak memory and unique ops by status."""

    name: str
    exit_code: int
    seconds: float
    peak_bytes: int
    cli_bytes: int
    statuses: dict[str, int]
    log: Path


def run_one(name: str, layers: int, timeout: float) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix=f"opbyop-user-moe-{name}-"))
    env = {**os.environ, "OPBYOP_HOME": str(home), "BENCH_USER_MOE_LAYERS": str(layers),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    factory = f"bench_user_moe:{name.replace('-', '_').replace('.', '_')}"
    command = [sys.executable, "-m", "opbyop.cli.main", "run", factory, "--no-whole", "--timeout", str(timeout)]
    run = measured(command, env)
    (home / "run.log").write_text(run.output)
    rows = sql("SELECT status, count(*) AS unique_ops FROM results GROUP BY 1 ORDER BY 2 DESC", env)
    return Outcome(name, run.exit_code, run.seconds, run.memory.peak, run.memory.own,
                   {r["status"]: int(r["unique_ops"]) for r in rows}, home / "run.log")


def slowest(env: dict[str, str], limit: int = 6) -> list[dict]:
    """The ops that took longest, and every op without success, with where their time went."""
    return sql("WITH timed AS (SELECT r.op_name, r.status, round(r.device_s, 1) AS device_s, "
                     "round(r.golden_s, 1) AS golden_s, round(epoch(r.ended_at) - epoch(r.started_at), 1) AS total_s, "
                     "left(r.message, 120) AS message, (SELECT left(CAST(o.inputs AS VARCHAR), 200) FROM ops o "
                     "WHERE o.signature = r.signature LIMIT 1) AS inputs FROM results r) "
                     f"SELECT * FROM timed QUALIFY row_number() OVER (ORDER BY total_s DESC) <= {limit} "
                     "OR status != 'success' ORDER BY total_s DESC", env)


KERNEL = """
import sys, time, tracemalloc
import numpy as np
from opbyop.device.formats import BF16, fidelity_matmul
experts = int(sys.argv[1])
rng = np.random.default_rng(0)
a = np.broadcast_to(rng.standard_normal((1, 1024, 2048)).astype(BF16), (experts, 1024, 2048)).copy()
b = rng.standard_normal((experts, 2048, 1536)).astype(BF16)
tracemalloc.start()
start = time.perf_counter()
fidelity_matmul(a, b, "hifi4", True)
print(f"{time.perf_counter() - start:.2f} s, numpy's peak {tracemalloc.get_traced_memory()[1] / 1e9:.2f} GB")
"""


GATHER = """
import sys, time
import numpy as np
from opbyop.device.kernels import KERNELS, Call
from opbyop.device.program import Op, TensorType
n = int(sys.argv[1])
rng = np.random.default_rng(0)
table = rng.standard_normal((8, 28672)).astype(np.float32)
indices = rng.integers(0, table.size, (1, 1, n)).astype(np.int32)
f32 = lambda shape: TensorType(shape=shape, dtype="f32", layout=None)
op = Op(name="ttnn.rows_gather", operands=[0, 1], results=[2], operand_types=[f32(table.shape), TensorType(shape=indices.shape, dtype="si32", layout=None)],
        result_types=[f32((n,))], attrs=dict(sizes=[table.size], windows=[1], column=True, fill_out_of_bounds=False))
def memory(field):  # this process's memory (kB): tracemalloc would slow a Python loop several times
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])
before = memory("VmRSS")
start = time.perf_counter()
KERNELS["ttnn.rows_gather"](Call(op=op, inputs=[table, indices], out_types=op.result_types, chip_numerics=False))
print(f"{time.perf_counter() - start:.2f} s, peak memory +{(memory('VmHWM') - before) / 1e6:.2f} GB")
"""


def kernel_timing(script: str, size: int, root: Path) -> str:
    """`script` (KERNEL, GATHER) run with `size` on the device model of the checkout at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", script, str(size)], capture_output=True, text=True, env=env, cwd=root)
    return out.stdout.strip() or out.stderr.strip()[-300:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per op")
    parser.add_argument("--kernel", type=int, nargs="*", default=None, metavar="EXPERTS",
                        help="instead: time the device model's grouped matmul with these numbers of experts")
    parser.add_argument("--gather", type=int, nargs="*", default=None, metavar="VECTORS",
                        help="instead: time the device model's column row gather with these numbers of index vectors")
    parser.add_argument("--baseline-path", type=Path, default=None,
                        help="with --kernel or --gather: another checkout beside")
    args = parser.parse_args()
    timed = [(KERNEL, n, "experts") for n in args.kernel or []] + [(GATHER, n, "index vectors") for n in args.gather or []]
    for script, size, unit in timed:
        print(f"{size} {unit}: {kernel_timing(script, size, ROOT)}", flush=True)
        if args.baseline_path is not None:
            print(f"    baseline {args.baseline_path}: {kernel_timing(script, size, args.baseline_path)}", flush=True)
    if timed:
        return
    outcomes = []
    for name in args.models:
        outcome = run_one(name, args.layers, args.timeout)
        outcomes.append(outcome)
        verdicts = ", ".join(f"{s} {n}" for s, n in outcome.statuses.items()) or "none"
        print(f"{name}: exit {outcome.exit_code}, {outcome.seconds:.0f} s, peak {outcome.peak_bytes / 1e9:.1f} GB "
              f"(the CLI alone {outcome.cli_bytes / 1e9:.1f} GB); unique ops: {verdicts}; log {outcome.log}",
              flush=True)
        env = {**os.environ, "OPBYOP_HOME": str(outcome.log.parent)}
        for row in slowest(env):
            print(f"    {row['total_s']:>7} s (device {row['device_s']}, golden {row['golden_s']}) {row['status']:<16} "
                  f"{row['op_name']} {row['inputs']}: {row['message'] or ''}")
    print("\nmodel              seconds  peak GB  no verdict  goal (<= 600 s, <= 8 GB, every op a verdict)")
    for o in outcomes:
        missing = sum(n for s, n in o.statuses.items() if s in NO_VERDICT)
        met = o.seconds <= 600 and o.peak_bytes <= 8e9 and missing == 0 and o.exit_code in (0, 1)
        print(f"{o.name:<18} {o.seconds:8.0f} {o.peak_bytes / 1e9:8.1f} {missing:11d}  {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
