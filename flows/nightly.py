"""The nightly flow: the zoo from configs/nightly.yaml on every target, then expectations.

Each target (chip x compiler options) is one `analyze` subflow run; its aggregation, report and
artifacts come with it. The nightly adds the expectations check: unexpected failures AND
unexpected passes, so configs/expectations.yaml stays true.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Completed
from pydantic import BaseModel, Field

from flows.analyze import analyze, new_run_id
from opbyop.config import AnalysisConfig, ClusterConfig, CompilerOptions, config_dir, load_config
from opbyop.workspace import Workspace
from storage.dataset import Store
from storage.expectations import compare, load_expectations


class Target(BaseModel):
    chip: str = "p150"
    compiler: CompilerOptions = Field(default_factory=CompilerOptions)


class NightlyConfig(BaseModel):
    models: list[str]
    targets: list[Target] = Field(default_factory=lambda: [Target()])
    op_timeout_s: float = 120.0
    reuse_cached: bool = True


def load_nightly(path: Path | None = None) -> NightlyConfig:
    return load_config(NightlyConfig, path or config_dir() / "nightly.yaml", "nightly configuration")


@flow(name="nightly", persist_result=False)
def nightly(config_file: str | None = None, models: list[str] | None = None,
            cluster: ClusterConfig = ClusterConfig()):
    """Every target of the nightly configuration, one analysis run each, then the expectations check."""
    logger = get_run_logger()
    config = load_nightly(Path(config_file) if config_file else None)
    store = Store(Workspace.default().store)
    expectations = load_expectations()
    lines = []
    for target in config.targets:
        run_id = new_run_id()
        state = analyze(config=AnalysisConfig(models=models or config.models, chip=target.chip,
                                              compiler=target.compiler, op_timeout_s=config.op_timeout_s,
                                              reuse_cached=config.reuse_cached, cluster=cluster),
                        run_id=run_id, return_state=True)
        lines.append(f"- {target.chip} {target.compiler.model_dump(exclude_none=True)}: {state.message}")
        if not store.has_run(run_id):
            continue
        report = compare(run_id, store.results(run_id), store.ops(run_id), expectations)
        lines.append(f"  - expectations: {len(report.unexpected_failures)} unexpected failures, "
                     f"{len(report.unexpected_passes)} unexpected passes")
    create_markdown_artifact(markdown="# Nightly\n\n" + "\n".join(lines) + "\n", key="nightly-summary")
    logger.info("\n".join(lines))
    return Completed(message="; ".join(line.strip("- ") for line in lines if not line.startswith("  ")))
