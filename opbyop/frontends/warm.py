"""Imported by the export forkserver (frontends.isolation.PRELOAD): one tiny torch export and
torch-mlir lowering, and JAX imported, so that every export's child is forked with their first-use
costs paid (torch imports some 850 modules on its first export, JAX takes 1.5 s to import: ~3 s a
child otherwise). Nothing here may fail the
forkserver: a warm-up that raises leaves the children to pay those costs themselves."""

from __future__ import annotations

import gc

import torch

from opbyop.frontends.torch_export import export_torch
from opbyop.jaxenv import prepare_jax


def warm_up() -> None:
    try:
        prepare_jax()  # JAX on the CPU, imported (no backend started: no thread to fork)
        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        export_torch(model, [torch.zeros(1, 4, device="meta")], "warm-up")
    except Exception:  # a warm-up is an optimisation: the children export without it
        pass
    # the warmed heap, out of the collector's sight: the forked children share it instead of copying
    # the pages a collection touches, and the forkserver ends at once with its parent (no collection
    # over torch's objects first, holding the parent's stdout for a second)
    gc.freeze()


warm_up()
