"""A run's progress read from the store while it goes: the signatures of its stored ops and results,
read part by part. A run writes a part per model (ops) and per batch of results (results); a
progress bar asks twice a second, so each read takes only the parts written since the one before
(reading the run's whole tables each time grew with the run: minutes of CPU over a run of hundreds
of models, taken from the run itself)."""

from __future__ import annotations

from opbyop_storage.dataset import Store
from opbyop_storage.files import DataFile, SkippedFile, Vanished


class RunSignatures:
    """The signatures in one run's rows of one table, as stored so far. A part the writer rewrote in
    place keeps what was read of it: the rows it lost were superseded by rows of a newer part."""

    def __init__(self, store: Store, table: str, run_id: str):
        self.store, self.table, self.run_id = store, table, run_id
        self.parts: dict[DataFile, set[str]] = {}
        self._all: set[str] = set()  # the parts' union, grown part by part (made again only when one goes)

    def __call__(self) -> set[str]:
        """The signatures stored so far: a set this object keeps up to date (read it, never change it)."""
        files = self.store.files.data_files(self.table, self.run_id)
        gone = set(self.parts) - set(files)
        for part in gone:  # a part a writer replaced: its rows are in the new one
            del self.parts[part]
        if gone:
            self._all = set().union(*self.parts.values())
        for path in files:
            if path not in self.parts:
                got = self.store.files.read_part(path, self.table, columns=["signature"])
                if not isinstance(got, (Vanished, SkippedFile)):  # replaced meanwhile: read at the next call
                    self.parts[path] = set(got.column("signature").to_pylist()) - {None, ""}
                    self._all |= self.parts[path]
        return self._all
