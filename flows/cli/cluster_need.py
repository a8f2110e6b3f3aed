"""Whether a CLI run will soon want its Dask cluster: when to start the cluster the CLI starts for it.

The cluster costs a few CPU-seconds to start (its scheduler, its workers, their op workers warming
for the build), on a machine where the run's own start-up wants the same cores. A run wants it to
export a model with no fresh kept export and to analyse what its store does not hold.
- A model to export: the early start's thread finds it among the command's words (`exported`) and
  starts the cluster at once; any it misses starts it when the run places that export on it.
- What the store does not hold: told before any model is split (`ClusterNeed`), from the runs whose
  results a run may reuse (opbyop_storage.cache: the same compiler build, chip, options and opbyop
  code) that completed with the same models. When one exists, the run has likely nothing to hand
  out (the second night with nothing changed), and its cluster starts only when it first hands
  something out.
A wrong guess costs seconds, never a verdict: each op's reuse is still decided by its own key.
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
from opbyop_storage.cache import CachedResults
from opbyop_storage.dataset import Store
from opbyop_storage.location import StoreRoot


@dataclass(frozen=True)
class ClusterNeed:
    """A run as asked (`config`) and the store it writes to."""

    config: AnalysisConfig
    store: StoreRoot

    def why(self, compiler: Compiler) -> str | None:
        """Why the run will want its cluster soon; None when it probably will not: the store holds a
        completed run of the same models whose results the run may reuse (build `compiler`)."""
        config = self.config
        if not config.reuse_cached:
            return "nothing kept is reused (--no-reuse)"
        store = Store(self.store)
        cached = CachedResults(store, compiler.identity.key, config.chip, config.options_key(), verdict_code())
        try:
            reusable = set(cached.runs)
        finally:
            cached.close()
        if not any(run.run_id in reusable and _analysed(run, config) for run in store.runs()):
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


def _analysed(run: RunInfo, config: AnalysisConfig) -> bool:
    """Whether `run` completed every model `config` asks for, whole models too when it asks for them."""
    return (run.status is RunStatus.COMPLETED and set(config.models) <= set(run.models)
            and (run.config.get("whole_model", True) or not config.whole_model))
