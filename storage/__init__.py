"""opbyop's result store: a Parquet dataset (pyarrow) with DuckDB views, aggregation SQL and reports.

Depends on `opbyop` (its records), never on flows/ or tasks/; `opbyop` never imports it.

    from opbyop_storage import Store
    store = Store(root)                      # $OPBYOP_STORE, else $OPBYOP_HOME/store (default ./.opbyop/store) by default
    with store.writer() as w:                # one run, incrementally, crash-safe and resumable
        run = w.start(run_info)
        w.add_ops(records); w.add_results(batch) ...
        w.finish(run, model_summaries)
"""

from opbyop_storage.dataset import DatasetScan, RunWriter, Store
from opbyop_storage.files import SkippedFile, default_root
from opbyop_storage.schema import SCHEMA_VERSION

__all__ = ["DatasetScan", "RunWriter", "SCHEMA_VERSION", "SkippedFile", "Store", "default_root"]
