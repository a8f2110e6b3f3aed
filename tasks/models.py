"""A model's whole-model run staged: its module rewritten and its values written for the worker."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from opbyop.graph import ModelGraph
from opbyop.ir.rewrite import rewritten_text
from opbyop.worker.process import write_values


@task(name="stage-whole-model", task_run_name="stage-{graph.name}", cache_policy=NONE, persist_result=False)
def stage_whole_model(graph: ModelGraph, scratch: Path) -> tuple[str, str]:
    """(rewritten module text, path of the npz with its arguments and reference outputs)."""
    values = write_values(graph, scratch / f"{graph.name}-values.npz")
    return rewritten_text(graph.module_text, graph.name), str(values)
