"""A model's sharding plan (tensor / data parallel), written beside it in configs/models.yaml, made
into Shardy shardings on its @main arguments.

Weights are @main arguments, so a plan is a partition spec per parameter (matched by name pattern)
and per input: for each tensor dimension, the mesh axis (or axes) it is split over, or null. E.g. a
Megatron split of a Llama layer: q/k/v and gate/up projections column-parallel (`[model, null]`: a
torch Linear's weight is out x in), o and down projections row-parallel (`[null, model]`). The plan's
mesh is ROWSxCOLS, its axes named by `axes`; an axis of size 1 is left out of the module's mesh.
Parameters no pattern matches are replicated. The module then compiles for the plan's mesh.
"""

from __future__ import annotations

import fnmatch
from typing import Union

from pydantic import BaseModel, ConfigDict, Field

from opbyop.boards import parse_mesh
from opbyop.errors import ConfigError

AxisSpec = Union[str, list[str], None]


class ShardingPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mesh: str = Field(description="ROWSxCOLS, e.g. 1x2, 2x4, 4x8")
    axes: tuple[str, str] = Field(("batch", "model"), description="names of the mesh's rows and columns")
    inputs: list[list[AxisSpec] | None] = Field(default_factory=list,
                                                description="per input: the axis each dimension is split over")
    parameters: dict[str, list[AxisSpec]] = Field(
        default_factory=dict, description="parameter name pattern (fnmatch) -> the axis each dimension is split over")

    def shape(self) -> tuple[int, int]:
        return parse_mesh(self.mesh)

    def mesh_axes(self) -> list[tuple[str, int]]:
        """The module's mesh axes: the plan's axes of size > 1, rows first."""
        return [(name, size) for name, size in zip(self.axes, self.shape()) if size > 1]


def sharding_text(spec: list[AxisSpec] | None, rank: int, kept: set[str], what: str) -> str:
    """`#sdy.sharding<@mesh, [{"model"}, {}]>` for a partition spec (axes of size 1 dropped)."""
    spec = list(spec or [])
    if len(spec) > rank:
        raise ConfigError(f"the plan's spec {spec} for {what} has {len(spec)} dimensions, the tensor {rank}",
                          "give one entry per dimension of the tensor (null: not split)")
    spec += [None] * (rank - len(spec))
    dims = []
    for entry in spec:
        names = [] if entry is None else [entry] if isinstance(entry, str) else list(entry)
        dims.append("{" + ", ".join(f'"{n}"' for n in names if n in kept) + "}")
    return f"#sdy.sharding<@mesh, [{', '.join(dims)}]>"


def apply_plan(module_text: str, argument_names: list[str], input_count: int, plan: ShardingPlan,
               model: str) -> str:
    """`module_text` with the plan's mesh and its shardings on @main's arguments (the first
    `input_count` are inputs, the others parameters named by `argument_names`)."""
    from jaxlib.mlir import ir

    # jaxlib's MLIR loads only when a plan is applied: opbyop.config, which every process imports,
    # imports this module for ShardingPlan.
    from opbyop.ir.context import make_context
    from opbyop.ir.rewrite import main_func

    axes = plan.mesh_axes()
    kept = {name for name, _ in axes}
    for entry in [*plan.inputs, *plan.parameters.values()]:
        for dim in entry or []:
            for name in [] if dim is None else [dim] if isinstance(dim, str) else dim:
                if name not in plan.axes:
                    raise ConfigError(f"{model}'s sharding plan names mesh axis {name!r}, its axes are {list(plan.axes)}",
                                      "use the axes named in the plan's `axes`")
    parameters = argument_names[input_count:]
    for pattern in plan.parameters:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in parameters):
            raise ConfigError(f"{model}'s sharding plan pattern {pattern!r} matches no parameter "
                              f"(e.g. {', '.join(parameters[:4])})", "fix the pattern (fnmatch on parameter names)")
    devices = 1
    for _, size in axes:
        devices *= size
    with make_context():
        module = ir.Module.parse(module_text)
        main = main_func(module, model)
        args = main.regions[0].blocks[0].arguments
        old = list(ir.ArrayAttr(main.attributes["arg_attrs"])) if "arg_attrs" in main.attributes else []
        attrs = []
        for i, arg in enumerate(args):
            name = argument_names[i] if i < len(argument_names) else f"arg{i}"
            if i < input_count:
                spec = plan.inputs[i] if i < len(plan.inputs) else None
            else:
                spec = next((s for p, s in plan.parameters.items() if fnmatch.fnmatchcase(name, p)), None)
            rank = len(ir.RankedTensorType(arg.type).shape)
            entries = {e.name: e.attr for e in ir.DictAttr(old[i])} if i < len(old) else {}
            entries["sdy.sharding"] = ir.Attribute.parse(sharding_text(spec, rank, kept, f"{model} argument {name}"))
            attrs.append(ir.DictAttr.get(entries))
        main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
        i32 = ir.IntegerType.get_signless(32)
        module.operation.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, devices)
        module.operation.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
        axes_text = ", ".join(f'"{n}"={s}' for n, s in axes)
        declaration = ir.Module.parse(f"sdy.mesh @mesh = <[{axes_text}]>")
        with ir.InsertionPoint.at_block_begin(module.body):
            for op in declaration.body.operations:
                op.operation.clone()
        return module.operation.get_asm(enable_debug_info=True)
