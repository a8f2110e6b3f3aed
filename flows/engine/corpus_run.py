"""A corpus run: the single-op corpus's cases as the unique ops of one analyze run.

Everything after the split is AnalyzeRun's: the cache of earlier results, the warm-up, one Prefect
task per op on the Dask cluster, results stored in batches as a model's are (the pseudo-model
`corpus`), the summary, the report and the artifacts. A compile-only run stops each op after the
flatbuffer (no device run, no golden) and keeps its results apart in the cache (its own options key).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from opbyop_flows.engine.analyze_run import AnalyzeRun
from opbyop.corpus.ops import MODEL, CorpusSelection
from opbyop.corpus.run import corpus_model
from opbyop.records import RunInfo
from opbyop.run.models import Feed

COMPILE_ONLY_KEY = "compile-only"


@dataclass
class CorpusRun(AnalyzeRun):
    selection: CorpusSelection = field(default_factory=CorpusSelection)
    compile_only: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compile_only:
            settings = self.plan.settings.model_copy(update={"run_device": False, "run_golden": False,
                                                             "failed_pass": False})
            self.plan = self.plan.model_copy(update={"settings": settings})

    def info(self) -> RunInfo:
        info = super().info()
        key = f"{info.options_key}|{COMPILE_ONLY_KEY}" if self.compile_only else info.options_key
        return info.model_copy(update={"models": [MODEL], "options_key": key})

    def models(self) -> Feed:
        """The selected cases split into their ops, as one model (opbyop.corpus.run.corpus_model)."""
        start = time.monotonic()
        model = corpus_model(self.selection)
        self.clock.add("split", time.monotonic() - start)
        return model
