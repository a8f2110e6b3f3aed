"""Prefect settings of the product: cheap per-task orchestration, a quiet server, crash detection.

The server records task runs from events; with its default batch sizes of 1 and 20 it writes to its
database once per event, which on a small machine takes CPU from the ops themselves and leaves the
UI minutes behind a large fan-out (measured in benchmarks/bench_orchestration.py). Applied as
environment defaults (a user's own values win). A server started by hand needs them in its
environment too:

    env $(python -m opbyop_flows.hosting.settings --server --port 4200) prefect server start --host 127.0.0.1 --port 4200
"""

from __future__ import annotations

import argparse
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
# Every flow run sends a heartbeat event this often (Prefect's minimum; default 180 s): what the
# zombie automation (flows/hosting/crashed.py) watches to mark a run whose process was killed as Crashed.
HEARTBEAT = {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}
# Task runs log warnings and errors only: every op's task otherwise logs "Finished in state
# Completed()", formatted for the console and sent to the server, one database row per op; the
# task's state says the same (measured in benchmarks/bench_fanout.py). Flow runs still log at INFO.
TASK_LOGS = {"PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING"}


def apply_defaults() -> None:
    """Set the defaults above unless the environment already says otherwise."""
    for key, value in {**SERVER_BATCHING, **QUIET, **HEARTBEAT, **TASK_LOGS}.items():
        os.environ.setdefault(key, value)


def server_settings(ui_api_url: str | None = None) -> dict[str, str]:
    """What a Prefect server needs from the product (the UI's API address when not on port 4200)."""
    out = {**SERVER_BATCHING, **QUIET}
    if ui_api_url:
        out["PREFECT_UI_API_URL"] = ui_api_url
    return out


def server_env(ui_api_url: str | None = None, temporary: bool = False) -> dict[str, str]:
    """The environment of a server process: this one's, the product's settings where unset, and for
    a server that lives only for one CLI run, Prefect's temporary-server mode (no UI, fewer services)."""
    env = dict(os.environ)
    for key, value in server_settings(ui_api_url).items():
        env.setdefault(key, value)
    env.pop("PREFECT_API_URL", None)
    if temporary:
        env.update({"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"})
    return env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="print the product's Prefect settings as KEY=VALUE words")
    parser.add_argument("--server", action="store_true", help="the settings of a server (else of a client)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4200)
    args = parser.parse_args(argv)
    api = f"http://{args.host}:{args.port}/api"
    values = server_settings(api) if args.server else {**HEARTBEAT, **TASK_LOGS, "PREFECT_API_URL": api}
    print(" ".join(f"{k}={v}" for k, v in values.items()))


if __name__ == "__main__":
    main()
