"""The nightly flow: the zoo from configs/nightly.yaml on every target, compared night over night.

Each target (chip x compiler options x compiler build) is one `analyze` subflow run; its
aggregation, report and artifacts come with it. A target's build may be a release, a wheel, a library
or `newest` (resolved each night and recorded), and it may be compared with other builds the same
night (`compare_with`: one run per build, compared op by op) besides the previous night. With a `corpus` block, the single-op corpus runs too, through the same fan-out (one
`corpus` subflow run per chip, and per mesh of each board of its `meshes` for the multichip
cases: one task per unique op on the cluster, results stored as the model `corpus`), and the summary
gains the simulator's coverage. The nightly then compares each
model with that model's previous comparable night (same chip and options, the model split there),
checks the expectations (unexpected failures AND unexpected passes, so configs/expectations.yaml
stays true) and publishes one `nightly-summary` artifact. The targets' run ids derive from the
nightly's flow run: a retry of the nightly resumes them.
"""

from __future__ import annotations

from pathlib import Path

# first: importing the package applies the product's Prefect settings, which Prefect reads once, on its
# own import (`python flows/nightly.py` runs this file before anything else imports the package)
import opbyop_flows  # noqa: F401, I001
from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import get_run_context
from prefect.states import Completed, Failed
from pydantic import BaseModel, Field, field_validator

from opbyop_flows.analyze import analyze, claim_flow_run, run_id_for
from opbyop_flows.corpus import corpus
from opbyop_flows.hosting import handoff as handoffs
from opbyop_flows.engine.nightly_summary import TargetOutcome, nightly_markdown
from opbyop_flows.engine.run_ids import group_run_ids
from opbyop_flows.engine.summary import summary_of
from opbyop.boards import DEFAULT_CHIP
from opbyop.compiler_spec import check_spec
from opbyop.compiler.targets import target_for
from opbyop.config import (AnalysisConfig, ClusterConfig, CompilerOptions, DeviceOptions, Zoo, config_dir, load_config,
                           load_zoo)
from opbyop.workspace import Workspace
from opbyop_storage.aggregate import model_comparisons_for
from opbyop_storage.dataset import Store
from opbyop_storage.expectations import Expectations, compare, load_expectations, run_outcomes
from opbyop.corpus.config import CorpusConfig, load_corpus_config
from opbyop.corpus.mesh_run import board_targets
from opbyop.corpus.ops import CorpusSelection, mesh_selection, selected
from opbyop.errors import OpbyopError
from opbyop_tasks.corpus import CorpusOutcome, corpus_selection, coverage_markdown, store_coverage


class Target(BaseModel):
    chip: str = DEFAULT_CHIP
    compiler: CompilerOptions = Field(default_factory=CompilerOptions)
    compiler_build: str = Field("installed", description="the compiler build under test: installed, newest "
                                "(resolved each night, recorded), NAME==VERSION, a wheel or a PJRT library path")
    compare_with: list[str] = Field(default_factory=list, description="other compiler builds analysed on the same "
                                    "ops the same night, each compared op by op (besides the previous night)")
    mesh: str | None = Field(None, description="the chips' mesh ROWSxCOLS where the board allows several")
    models: list[str] | None = Field(None, description="this target's models (default: the nightly's): a mesh "
                                                       "target runs the sharded models made for it")
    tags: list[str] = Field(default_factory=list, description="run the zoo's models with any of these tags "
                            "(e.g. real-size) instead of the configuration's models")
    device: DeviceOptions = Field(default_factory=DeviceOptions, description="the device: `ttsim` (or "
                                  "{backend: ttsim, ...}) runs every op on Tenstorrent's simulator beside the model")

    @field_validator("device", mode="before")
    @classmethod
    def _device_by_name(cls, value: object) -> object:
        """`device: ttsim` is short for `device: {backend: ttsim}`."""
        return {"backend": value} if isinstance(value, str) else value

    def chosen_models(self, default: list[str], zoo: Zoo | None = None) -> list[str]:
        """The models this target runs: its own, else the zoo's models tagged with any of `tags` that
        run on it (a sharded model only on the mesh its plan is made for), else `default`."""
        if self.models:
            return self.models
        if not self.tags:
            return default
        zoo = zoo or load_zoo()
        mesh = target_for(self.chip, self.mesh).mesh
        return [m.name for m in zoo.models if set(m.tags) & set(self.tags)
                and (m.sharding is None or tuple(m.sharding.shape()) == tuple(mesh))]

    @field_validator("compiler_build", "compare_with")
    @classmethod
    def _builds(cls, value: str | list[str]) -> str | list[str]:
        """A build that no spec form names fails when the configuration is read, not at 2 a.m."""
        for spec in [value] if isinstance(value, str) else value:
            check_spec(spec)
        return value

    @property
    def compilers(self) -> list[str]:
        """The builds this target analyses: those it compares with first, its own last (each step of
        the group compares a build with the one before it)."""
        return [*dict.fromkeys(b for b in self.compare_with if b != self.compiler_build), self.compiler_build]

    @property
    def title(self) -> str:
        options = self.compiler.model_dump(exclude_none=True, exclude_defaults=True)
        build = "" if self.compiler_build == "installed" else f" compiled by {self.compiler_build}"
        against = f" against {', '.join(self.compare_with)}" if self.compare_with else ""
        return f"{self.chip}{f' {self.mesh}' if self.mesh else ''} " \
            + (", ".join(f"{k}={v}" for k, v in options.items()) or "default options") + build + against \
            + (f" on {self.device.backend}" if self.device.backend != "model" else "") \
            + (f" (models tagged {', '.join(self.tags)})" if self.tags else "")


class CorpusTarget(BaseModel):
    """The single-op corpus (StableHLO op set x dtypes x shapes) as a target of the nightly."""

    config: str = Field("corpus.yaml", description="its configuration, relative to configs/ (chips, ops, dtypes)")


class NightlyConfig(BaseModel):
    models: list[str]
    targets: list[Target] = Field(default_factory=lambda: [Target()])
    op_timeout_s: float = 120.0
    reuse_cached: bool = True
    whole_model: bool = True
    corpus: CorpusTarget | None = Field(None, description="also run the single-op corpus (the simulator's coverage)")
    pass_timing: float = Field(0.0, ge=0.0, le=1.0, description="share of ops timed pass by pass (the same ops "
                                                               "every night: chosen by signature)")


class NightlyFailed(Exception):
    """The data of a Failed nightly state: which targets did not complete."""


def load_nightly(path: Path | None = None) -> NightlyConfig:
    return load_config(NightlyConfig, path or config_dir() / "nightly.yaml", "nightly configuration")


@flow(name="nightly", persist_result=False)
def nightly(config_file: str | None = None, models: list[str] | None = None, expectations_file: str | None = None,
            cluster: ClusterConfig = ClusterConfig()):
    """Every target of the nightly configuration, one analysis run each, compared with the previous
    night per model and checked against the expectations."""
    logger = get_run_logger()
    claim_flow_run(logger)
    config = load_nightly(Path(config_file) if config_file else None)
    expectations = load_expectations(Path(expectations_file) if expectations_file else None)
    store = Store(Workspace.default().store)
    base = run_id_for(get_run_context().flow_run)
    # `opbyop nightly`'s: its Ctrl-C stops the target running, and the rest
    caller = handoffs.current() or handoffs.Handoff()
    outcomes = []
    with caller.splits.kept():  # every target's run takes the same models' splits
        for i, target in enumerate(config.targets):
            if caller.stop.is_set():
                break
            # each target's run measures its own phases; the stop request and the splits are shared
            with handoffs.handing_off(caller.beside()):
                outcomes.append(_run_target(i, target, base, config, models, cluster, store, expectations))
    if handoffs.current() is None:  # its own split thread ends here (a worker process serves many runs)
        caller.splits.close()
    markdown = nightly_markdown(base, outcomes)
    if config.corpus is not None and not caller.stop.is_set():
        with handoffs.handing_off(caller.beside()):
            markdown += "\n" + coverage_markdown(_run_corpus(config.corpus, base, config, cluster, store))
    create_markdown_artifact(markdown=markdown, key="nightly-summary",
                             description=f"nightly {base}: per target and model, against the previous night")
    lines = [f"{o.title}: {o.message}" for o in outcomes]
    logger.info("\n".join(lines))
    failed = [o for o in outcomes if not o.ok]
    if failed:
        message = f"{len(failed)} of {len(outcomes)} targets did not complete: " + "; ".join(
            f"{o.title}: {o.message}" for o in failed)
        return Failed(message=message, data=NightlyFailed(message))
    return Completed(message="; ".join(lines))


def _run_target(index: int, target: Target, base: str, config: NightlyConfig, models: list[str] | None,
                cluster: ClusterConfig, store: Store, expectations: Expectations) -> TargetOutcome:
    group = f"{base}-t{index}"
    analysis = AnalysisConfig(models=models or target.chosen_models(config.models), chip=target.chip,
                              compilers=target.compilers, compiler=target.compiler, mesh=target.mesh,
                              device=target.device, op_timeout_s=config.op_timeout_s,
                              reuse_cached=config.reuse_cached, whole_model=config.whole_model, cluster=cluster,
                              pass_timing=config.pass_timing)
    state = analyze(config=analysis, run_id=group, return_state=True)
    run_id = group_run_ids(group, len(target.compilers))[-1]  # the target's own build's run
    outcome = TargetOutcome(title=target.title, run_id=run_id, state=state.name, message=state.message or "")
    try:
        data = state.result(raise_on_failure=False) if state.is_final() else None
    except Exception:  # a crashed subflow holds no result: its message says why
        data = None
    summary = summary_of(data)
    if summary is not None:
        outcome.model_errors = summary.model_errors
        outcome.compilers = [c["line"] for c in summary.comparisons]
    if store.has_run(run_id):
        outcome.expectations = compare(run_id, run_outcomes(store.root, run_id), expectations)
        outcome.comparisons = model_comparisons_for(store.root, run_id)
    return outcome


def _run_corpus(target: CorpusTarget, base: str, config: NightlyConfig, cluster: ClusterConfig,
                store: Store) -> list[CorpusOutcome]:
    """One `corpus` run per chip of the corpus configuration, then one per mesh of each board of its
    `meshes` (its multichip cases), run ids `<nightly>-corpus-<i>`; a run that fails never stops the others."""
    settings = load_corpus_config(config_dir() / target.config)
    selection = corpus_selection(settings)
    runs: list[tuple[str, str, CorpusSelection | Exception]] = [(chip, chip, selection) for chip in settings.chips]
    for board in settings.meshes:
        try:
            runs += [(t.chip, f"{t.chip} {t.mesh_text}", mesh_selection(selection, t.mesh_text))
                     for t in board_targets(board)]
        except OpbyopError as e:  # a board the configuration misnames: said in the summary
            runs.append((board, board, e))
    outcomes = []
    for i, (chip, title, chosen) in enumerate(runs):
        outcomes.append(_corpus_outcome(chip, title, chosen, f"{base}-corpus-{i}", settings, config, cluster, store))
    return outcomes


def _corpus_outcome(chip: str, title: str, selection: CorpusSelection | Exception, run_id: str,
                    settings: CorpusConfig, config: NightlyConfig, cluster: ClusterConfig,
                    store: Store) -> CorpusOutcome:
    """One corpus run on `chip` and its coverage read back from the store."""
    if isinstance(selection, Exception):
        return CorpusOutcome(chip=title, run_id=run_id, state="Error", message=str(selection))
    try:
        if next(selected(selection), None) is None:  # e.g. a board when the dtypes are none of its catalog's
            return CorpusOutcome(chip=title, run_id=run_id, state="Skipped", message="none of the corpus's ops, "
                                 "dtypes and forms is in its catalog")
        state = corpus(selection=selection, chip=chip, compiler=settings.compiler,
                       op_timeout_s=settings.op_timeout_s, reuse_cached=config.reuse_cached, cluster=cluster,
                       run_id=run_id, return_state=True)
        outcome = CorpusOutcome(chip=title, run_id=run_id, state=state.name, message=state.message or "")
    except Exception as e:  # noqa: BLE001  (said in the summary; the next run goes on)
        outcome = CorpusOutcome(chip=title, run_id=run_id, state="Error", message=f"{type(e).__name__}: {e}")
    if store.has_run(run_id):
        outcome.coverage = store_coverage(store, run_id, selection, chip, Workspace.default().artifacts.read_text)
    return outcome


if __name__ == "__main__":  # `python flows/nightly.py [CONFIG]`: one nightly, as Prefect users run a flow
    import sys

    state = nightly(config_file=sys.argv[1] if len(sys.argv) > 1 else None, return_state=True)
    print(f"nightly: {state.name}: {state.message or ''}")
    sys.exit(0 if state.is_completed() else 1)
