"""Golden comparison of a sharded op or model: per device shard, and as the gathered result.

XLA:CPU runs the same sharded module on a host mesh (golden.xla_cpu.XlaCpu.run_sharded): each
device's shard of each output, and the global value gathered from them. A device run of the mesh
program is compared both ways: the gathered value finds a wrong number anywhere; the shards say
which device holds it (a collective that delivered the wrong piece to one chip shows on that chip
alone, and a replicated output that differs between chips shows although each chip is plausible).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from opbyop.golden.compare import Thresholds, compare
from opbyop.records import GoldenComparison


class MeshComparison(BaseModel):
    """The gathered comparison, and per device (in device order) the comparison of its shards."""

    model_config = {"ser_json_inf_nan": "constants"}

    gathered: GoldenComparison
    shards: list[GoldenComparison]

    @property
    def passed(self) -> bool:
        return self.gathered.passed and all(s.passed for s in self.shards)

    def failing_devices(self) -> list[int]:
        return [i for i, s in enumerate(self.shards) if not s.passed]


def compare_on_mesh(actual: list[np.ndarray], actual_shards: list[list[np.ndarray]] | None,
                    expected: list[np.ndarray], expected_shards: list[list[np.ndarray]], dtypes: list[str],
                    thresholds: Thresholds) -> MeshComparison:
    """`actual` (gathered outputs) and `actual_shards` (per output, per device) against the host
    mesh's; without device shards, only the gathered values are compared."""
    gathered = compare(actual, expected, dtypes, thresholds)
    if actual_shards is None:
        return MeshComparison(gathered=gathered, shards=[])
    devices = len(expected_shards[0]) if expected_shards else 0
    per_device = []
    for d in range(devices):
        mine = [shards[d] for shards in actual_shards] if all(len(s) > d for s in actual_shards) else []
        per_device.append(compare(mine, [shards[d] for shards in expected_shards], dtypes, thresholds))
    return MeshComparison(gathered=gathered, shards=per_device)
