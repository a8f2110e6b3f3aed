"""Prefect settings that keep per-task orchestration cheap (measured in benchmarks/bench_orchestration.py).

The server records task runs from events; with its default batch sizes of 1 and 20 it writes to its
database once per event, which on a small machine takes CPU from the ops themselves and leaves the
UI minutes behind a large fan-out. Applied as environment defaults (a user's own values win); a
server started by hand needs them in its environment too (deployments/README.md).
"""

from __future__ import annotations

import os

SERVER_BATCHING = {
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "200",
}
QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # else 'database is locked' at start
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",  # 13-18 s to start on 2 loaded cores
}


def apply_defaults() -> None:
    """Set the defaults above unless the environment already says otherwise."""
    for key, value in {**SERVER_BATCHING, **QUIET}.items():
        os.environ.setdefault(key, value)
