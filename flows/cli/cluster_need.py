"""Whether a CLI run will soon want its Dask cluster: when to start the cluster the CLI starts for it.

The cluster costs a few CPU-seconds to start (its scheduler, its workers, their op workers warming
for the build), on a machine where the run's own start-up wants the same cores. A run wants it to
export a model with no fresh kept export and to analyse what its store does not hold. The second is
told before any model is split, from the store's runs: a completed run of the same models by the
same compiler build, chip, options and opbyop verdict code. When one exists, a run has likely nothing
to hand out (the second night with nothing changed), and its cluster starts only when it first
hands something out. A wrong guess costs seconds, never a verdict: each op's reuse is still decided
by its own key (opbyop_storage.cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from opbyop.compiler.builds import Compiler
from opbyop.config import AnalysisConfig, load_zoo
from opbyop.frontends.export_cache import ExportCache
from opbyop.frontends.loader import needs_export
from opbyop.records import RunInfo, RunStatus
from opbyop.run.verdict_code import verdict_code
from opbyop_storage.dataset import Store
from opbyop_storage.location import StoreRoot


@dataclass(frozen=True)
class ClusterNeed:
    """A run as asked (`config`) and the store it writes to."""

    config: AnalysisConfig
    store: StoreRoot

    def why(self, compiler: Compiler) -> str | None:
        """Why the run will want its cluster soon; None when it probably will not (its models' exports
        are kept, and the store holds a completed run of the same models by the same build `compiler`,
        chip, options and code)."""
        config = self.config
        exporting = exported(config.models, config.seed, config.keeps_weights, config.reuse_cached)
        if exporting is not None:
            return exporting
        if not any(_same_ask(run, config, compiler) for run in Store(self.store).runs()):
            return "no completed run of these models by this build, chip, options and code in the store"
        return None


def exported(specs: Sequence[str], seed: int, weights: bool, reuse: bool = True) -> str | None:
    """Why a model of `specs` will be exported (the first one found: no fresh kept export, or
    nothing kept is used), or None. A spec that names no exported model (a file, an option's value
    read as one) is none."""
    if not reuse:
        return "nothing kept is reused (--no-reuse)"
    zoo, exports = load_zoo(), ExportCache()
    for spec in specs:
        if needs_export(spec, zoo, seed, exports, weights):
            return f"{spec} is exported"
    return None


def _same_ask(run: RunInfo, config: AnalysisConfig, compiler: Compiler) -> bool:
    """Whether `run` analysed every model `config` asks for, as `config` asks for it."""
    return (run.status is RunStatus.COMPLETED and set(config.models) <= set(run.models)
            and run.config.get("chip") == config.chip and run.options_key == config.options_key()
            and run.compiler.key == compiler.identity.key and run.verdict_code == verdict_code()
            and (run.config.get("whole_model", True) or not config.whole_model))
