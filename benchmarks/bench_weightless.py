"""Models without their weights: export, split, dedupe and real-value replay of the real-size zoo.

    .venv/bin/python benchmarks/bench_weightless.py [--models llama-3.1-8b llama-3.1-70b ...]

Each model is prepared (export on the meta device, split, dedupe, upstream replay on XLA:CPU) in a
fresh process whose peak RSS is its own. Goal: peak memory flat in the model's size (the weights
are never allocated). Baseline in the same run: one layer of llama-3.1-8B's dimensions built with
real bf16 weights (the path a model with weights takes; vocabulary 32000 to stay within 6 GB) beside
the same layer on the meta device.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Figures

LAYER = dict(arch="llama", dtype="bfloat16", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
             num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192)


def prepare_one(spec: str) -> dict:
    """Runs in the child: one model through pipeline.prepare; its figures as a dict."""
    import resource

    from opbyop.jaxenv import prepare_jax

    prepare_jax()
    from opbyop.config import InputSpec, Zoo, ZooEntry, load_zoo
    from opbyop.pipeline import prepare
    from opbyop.workspace import Workspace

    zoo = load_zoo()
    if spec.startswith("layer:"):  # the baseline: one layer of llama-3.1-8B, meta or real weights
        kwargs = {**LAYER}
        factory = "opbyop.frontends.models.hf:meta_model"
        if spec == "layer:real":
            factory = "benchmarks.bench_weightless:real_layer"
            kwargs = {}
        zoo = Zoo(models=[ZooEntry(name=spec.replace(":", "-"), frontend="torch", factory=factory, kwargs=kwargs,
                                   inputs=[InputSpec(name="input_ids", shape=[1, 128], dtype="int64", high=32000)])])
        spec = spec.replace(":", "-")
    start = time.perf_counter()
    run = prepare([spec], zoo=zoo, artifacts=Workspace(Path(tempfile.mkdtemp())).artifacts)
    if run.errors:
        return {"model": spec, "error": run.errors[spec][:200]}
    graph = run.graphs[spec]
    return {"model": spec, "export_s": graph.export_seconds, "prepare_s": time.perf_counter() - start,
            "ops": len(run.records), "unique": len(run.unique),
            "frontend_failures": len(graph.frontend_failures),
            "real_value_ops": sum(1 for op in run.unique if op.input_values),
            "synthetic_value_ops": sum(1 for op in run.unique if op.synthetic_reasons),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def real_layer():
    """One llama-3.1-8B layer with real (random) bf16 weights, as a model with weights is built."""
    import torch
    import transformers

    from opbyop.frontends.models.hf import FirstOutput

    config = {k: v for k, v in LAYER.items() if k not in ("arch", "dtype")}
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(attn_implementation="eager", **config))
    return FirstOutput(model.to(torch.bfloat16), "logits")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b",
                                                        "mixtral-8x7b", "whisper-large-v3-encoder"])
    parser.add_argument("--no-baseline", action="store_true", help="skip the one-layer real-weights baseline")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(prepare_one(args.one)))
        return
    specs = ([] if args.no_baseline else ["layer:real", "layer:meta"]) + list(args.models)
    figures = Figures("prepare (export on the meta device, split, dedupe, real-value replay), one process each",
                      ["model", "export s", "prepare s", "ops", "unique", "frontend failures", "ops with real values",
                       "ops with synthetic values", "peak RSS GB", "error"])
    root = Path(__file__).resolve().parent
    for spec in specs:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", spec], capture_output=True,
                              text=True, cwd=root.parent, env=None)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            figures.add(spec, "", "", "", "", "", "", "", "", f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
            continue
        f = json.loads(lines[-1])
        figures.add(f["model"], f.get("export_s", ""), f.get("prepare_s", ""), f.get("ops", ""), f.get("unique", ""),
                    f.get("frontend_failures", ""), f.get("real_value_ops", ""), f.get("synthetic_value_ops", ""),
                    f.get("peak_rss_gb", ""), f.get("error", ""))
    figures.show()


if __name__ == "__main__":
    main()
