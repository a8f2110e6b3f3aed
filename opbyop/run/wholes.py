"""What a whole-model result depends on, as the key a later run finds it by: the graph (its module,
its arguments' descriptions and values, the framework's reference outputs), the chip's descriptor,
the seed its missing values are drawn from, the time it was given, and opbyop's own code that
compiles, simulates and compares it (a changed device model is another verdict). The compiler build
and the options are the runs' own keys (the store looks only among runs of the same build, chip and
options, as it does for ops' results)."""

from __future__ import annotations

import json

from opbyop.digests import arrays_digest, text_digest
from opbyop.graph import ModelGraph
from opbyop.run.plan import RunPlan
from opbyop.run.verdict_code import verdict_code


def whole_key(graph: ModelGraph, plan: RunPlan) -> str:
    arguments = json.dumps([[a.name, a.kind.value, a.tensor.model_dump(mode="json"), a.buffer]
                            for a in graph.arguments])
    return text_digest(graph.module_text, arguments, arrays_digest(graph.argument_values or []),
                       arrays_digest(graph.reference_outputs or []), plan.desc.sha256, str(plan.config.seed),
                       str(plan.whole_timeout), verdict_code())[:40]
