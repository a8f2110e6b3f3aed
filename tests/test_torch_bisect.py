"""Bisecting an FX graph to the ops a failure comes from (frontends.torch_bisect), without the compiler:
an attempt that fails exactly when its part holds a given op stands for torch-mlir."""

from __future__ import annotations

import torch

from opbyop.frontends.torch_bisect import Attempt, bisect, subgraph, units


class Chain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) + 1
        z = torch.tanh(y) * 2
        w = torch.sigmoid(z) - y
        return torch.exp(w) / 3


def graph() -> torch.fx.Graph:
    return torch.export.export(Chain(), (torch.ones(2, 3),)).graph_module.graph


def failing_on(*targets: str):
    tried: list[int] = []

    def attempt(part):
        tried.append(len(part))
        bad = [u[0] for u in part if any(t in str(u[0].target) for t in targets)]
        return Attempt(not bad, "it blew up")
    return attempt, tried


def test_bisecting_finds_each_op_that_fails_alone_with_the_failure_s_words():
    attempt, tried = failing_on("tanh", "exp")
    found = bisect(units(graph()), attempt)
    assert sorted(str(n.target) for n in found) == ["aten.exp.default", "aten.tanh.default"]
    assert set(found.values()) == {"it blew up"}
    assert len(tried) < 2 * len(units(graph()))  # halves, not every op


def test_a_failure_no_part_has_alone_blames_no_op():
    def only_the_whole_fails(part):
        return Attempt(len(part) < len(units(graph())), "too big together")
    assert bisect(units(graph()), only_the_whole_fails) == {}


def test_a_part_named_by_its_failure_is_not_split_further():
    g = graph()
    tanh = next(n for n in g.nodes if "tanh" in str(n.target))
    found = bisect(units(g), lambda part: Attempt(False, "named", {tanh: "tanh named"}))
    assert found == {tanh: "tanh named"}


def test_a_part_of_the_graph_takes_what_it_uses_from_outside_and_gives_what_is_used_outside():
    g = graph()
    parts = units(g)
    middle = [u for u in parts if any(k in str(u[0].target) for k in ("tanh", "mul", "sigmoid"))]
    module, originals = subgraph(middle)
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    assert len(placeholders) == 1  # y, made before the part (by the add)
    assert [str(originals[n].target) for n in output.args[0]] == ["aten.sigmoid.default"]  # the sub, after it, reads it
    y = torch.ones(2, 3)
    (out,) = module(y)
    assert torch.allclose(out, torch.sigmoid(torch.tanh(y) * 2))
