"""The store's commands under hostile and careless input: data printed literally and
whole, queries stopped by Ctrl-C, a time limit and a memory limit, corrupt files named (never
'0 checked'), a corrupt run resumable, a full disk one line with nothing partial left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbyop.cli.main import build_app
from opbyop_storage.dataset import Store
from opbyop_storage.readonly import QueryInterrupted, StoreConnection

ENDLESS = ("SELECT count(*) FROM range(100000) a, range(100000) b, range(100000) c "
           "WHERE a.range + b.range + c.range = -1")


@pytest.fixture
def opbyop():
    runner = CliRunner()

    def run(*args: object) -> tuple[int, str]:
        result = runner.invoke(build_app(), [str(a) for a in args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.output

    return run


def corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-40:-8] = b"\xff" * 32  # the footer no longer parses
    path.write_bytes(bytes(data))


def run_file(store: Store, table: str, run_id: str) -> Path:
    (path,) = (store.root / table).glob(f"date=*/run_id={run_id}/*.parquet")
    return path


def test_values_are_printed_literally_and_whole(opbyop, store_root):
    long = "x" * 300
    code, out = opbyop("sql", f"SELECT '[/x]' AS a, '[red]hi' AS b, ':factory:' AS c, chr(27) || '[31m' AS d, "
                              f"'{long}' AS e", "--store", store_root)
    assert code == 0, out
    assert "[/x]" in out and "[red]hi" in out and ":factory:" in out and "\\x1b[31m" in out
    assert long in out  # one cell, not cut to 80 columns on a pipe


def test_a_query_past_its_time_limit_is_stopped(opbyop, store_root):
    code, out = opbyop("sql", ENDLESS, "--store", store_root, "--timeout", "1")
    assert code == 2 and "ran longer than its limit of 1 s" in out and "--timeout" in out, out


def test_a_query_past_its_memory_limit_is_stopped(opbyop, store_root):
    code, out = opbyop("sql", "SELECT list(range) FROM range(200000000)", "--store", store_root,
                       "--memory-limit", "64MB")
    assert code == 2 and "more memory than its limit of 64MB" in out and "--memory-limit" in out, out


def test_ctrl_c_interrupts_a_running_query(store_root):
    """A real SIGINT, sent once the query's thread runs (the query cannot finish by itself)."""
    def send_when_running() -> None:
        while not any(t.name == "duckdb-query" for t in threading.enumerate()):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    with StoreConnection(store_root) as con:
        threading.Thread(target=send_when_running, daemon=True).start()
        with pytest.raises(QueryInterrupted, match="interrupted"):
            con.query(ENDLESS)
        assert con.query("SELECT 42 AS x").rows == [(42,)]  # the connection still works


def test_query_list_and_missing_runs(opbyop, history_store):
    code, out = opbyop("query", "--list", "--store", history_store.root)
    assert code == 0 and "blockers" in out and "run_id" in out, out
    code, out = opbyop("query", "blockers", "--run", "nosuchrun", "--store", history_store.root)
    assert code == 2 and "run 'nosuchrun' is not in the store" in out, out
    code, out = opbyop("query", "blockers", "--store", history_store.root)
    assert code == 2 and "pass --run RUN_ID" in out, out


def test_unreadable_results_are_named_never_counted_as_zero(opbyop, history_store):
    corrupt(run_file(history_store, "results", "n2"))
    for args in (["expectations", "check", "--run", "n2"], ["query", "blockers", "--run", "n2"],
                 ["export", "optest", "--run", "n2", "--out", history_store.root / "o.json"]):
        code, out = opbyop(*args, "--store", history_store.root)
        assert code == 2 and "corrupt file" in out and "results" in out and "--run-id n2" in out, out
        assert "0 checked" not in out


def test_a_run_whose_runs_file_is_corrupt_says_so_and_can_be_resumed(opbyop, history_store):
    from store_samples import history

    corrupt(run_file(history_store, "runs", "n1"))
    code, out = opbyop("query", "blockers", "--run", "n1", "--store", history_store.root)
    assert code == 2 and "its runs file is corrupt" in out and "not in the store" not in out, out
    n1 = next(night for night in history() if night.run.run_id == "n1")
    with history_store.writer() as writer:  # what `opbyop analyze ... --run-id n1` does
        run = writer.start(n1.run)
        done = writer.completed_signatures()
        writer.add_results([r for r in n1.results if r.signature not in done])
        writer.finish(run, n1.models)
    assert Store(history_store.root).check_readable("n1").status == "completed"
    expectations = history_store.root.parent / "expectations.yaml"
    expectations.write_text("expectations: []\n")
    code, out = opbyop("expectations", "check", "--run", "n1", "--store", history_store.root, "--file", expectations)
    assert "is corrupt" not in out and f"{len(n1.results)} checked" in out, out


FILL_DISK = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writing past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
from opbyop_storage.dataset import Store
from tests.store_samples import history
from opbyop.errors import StoreError
night = history()[1]
store = Store(sys.argv[1])
results = [r.model_copy(update={"message": f"{i} " + "m" * 4000}) for i, r in enumerate(night.results * 40)]
try:
    store.write_run(night.run, night.ops, results, night.models)
except StoreError as e:
    print("StoreError:", e)
"""


def test_a_full_disk_is_one_line_and_leaves_no_partial_file(store_root):
    """The file system's limit is real (RLIMIT_FSIZE in a child process: EFBIG, as a full disk's ENOSPC)."""
    proc = subprocess.run([sys.executable, "-c", FILL_DISK, str(store_root)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "StoreError: the disk is full: cannot write" in proc.stdout and "free space on /" in proc.stdout, proc.stdout
    assert not [p for p in store_root.rglob("*") if ".partial" in p.name or ".tmp-" in p.name], "a partial file was left behind"


@pytest.mark.slow
def test_the_cli_reports_a_full_disk_in_one_line(history_store, tmp_path):
    script = ("import resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
              "sys.argv = ['opbyop', 'export', 'optest', '--run', 'n2', '--out', sys.argv[1], '--store', sys.argv[2]]\n"
              "from opbyop.cli.main import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "optest.json"), str(history_store.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "error: the disk is full" in proc.stderr and "run the same command again" in proc.stderr, proc.stderr
