"""The form in which a mixture-of-experts layer's experts are exported.

transformers runs a model's experts through an interface (`config._experts_implementation`): 'eager'
loops over the experts hit (data-dependent: torch.export cannot keep it), 'grouped_mm' sorts the
tokens*top_k routed rows by expert and multiplies consecutive row groups (a ragged matmul whose group
ends are tensor values; opbyop's static-shape decomposition multiplies every routed row by every
expert: experts*tokens*top_k rows), 'batched_mm' gathers each routed row's own weight matrix (a gather
of tokens*top_k weight matrices, more bytes than the whole layer).

EVERY_EXPERT: every expert over each token once, then each token's outputs combined with its routing
weights (zero for the experts it did not pick). Shapes are static, there is no gather and no sort; a
token picks an expert at most once, so nothing is dropped and the result is the model's. Its work is
experts*tokens rows: top_k times less than the grouped form's decomposition, and the arithmetic of a
dense feed-forward layer as wide as all the experts (experts/top_k times the routed rows).

CAPACITY (GShard/Switch-style dispatch): each expert has C slots; each token takes, in token order,
the next free slot of each expert it picked. A one-hot dispatch tensor (tokens, experts, C) moves the
tokens into the slots with a matmul, each chunk of experts runs its batched matmuls over its
(experts x C) slots, and the slots' outputs come back to their tokens through the same tensor scaled
by the routing weights. Its expert work is experts*C rows, about tokens*top_k*factor: proportional to
the rows routed, static shapes, no gather, no sort. C is the largest load of the input when the
routing has values (a model with real weights: the framework's run on the example input measures it
and the export keeps it), so nothing is dropped for that input; traced without values (meta-device
weights) C = ceil(tokens * top_k / experts * factor), factor 1.25 unless named (capacity-2), at most
the tokens. What overflow loses: a token whose expert's C slots are taken by earlier tokens gets
nothing from that expert: its output is the weighted sum of its other experts' outputs only (the
routing weights are not renormalised; a token that overflows every expert it picked gets a zero
expert output, so the layer passes on its residual alone). Later tokens are the ones to lose. The
ops analysed have the same shapes whatever the routing; a whole-model run's numbers differ from the
model's only for an input that overflows.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, _default_apply_gate, grouped_mm_experts_forward

EVERY_EXPERT = "every-expert"  # the form's name, as a model's tag records it (experts:every-expert)
GROUPED = "grouped-dense"  # transformers' grouped_mm, decomposed to every routed row x every expert
CAPACITY = "capacity"  # E x C expert slots; named with its factor (capacity-1.25) once chosen
CAPACITY_FACTOR = 1.25  # the capacity form's slots per expert over the mean load, unless named (capacity-2)
# What opbyop's factories export unless told: a verdict on every expert op at real size for the least
# work (README: the forms side by side on Qwen3-30B-A3B)
DEFAULT_FORM = CAPACITY
MEASURED = "max-load"  # the capacity form's name suffix once a forward with values measured the load
# Their keys in transformers' experts interface: the grouped form under a name of opbyop's own, so that
# a model asking for it is told apart from one left at transformers' default.
FORMS = {EVERY_EXPERT: "opbyop_every_expert", GROUPED: "opbyop_grouped", CAPACITY: "opbyop_capacity"}
TRANSFORMERS_DEFAULTS = {None, "grouped_mm", "eager"}  # what a model built without a choice runs


CHUNK_BYTES = 128 << 20  # the most bytes of one weight tensor a chunk of experts holds


def every_expert_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward (tokens x hidden -> tokens x hidden), every expert on every
    token, chunk by chunk of experts (chunk_experts): identical chunks are one unique op each."""
    experts = torch.arange(self.num_experts, device=top_k_index.device)
    picked = (top_k_index.unsqueeze(-1) == experts).to(top_k_weights.dtype)  # (T, k, E)
    combine = (picked * top_k_weights.unsqueeze(-1)).sum(1).t().to(hidden_states.dtype)  # (E, T)
    out = None
    for c, weights in enumerate(_chunks(self)):
        size = weights["down"].shape[0]
        share = combine[c * size:(c + 1) * size]
        if self.is_transposed:  # weights (E, in, out): activations stay (E, T, features)
            part = (_rows_layout(self, hidden_states.unsqueeze(0), weights) * share.unsqueeze(-1)).sum(0)
        else:  # weights (E, out, in): activations as (E, features, T), so no weight is ever transposed
            part = (_columns_layout(self, hidden_states.t(), weights) * share.unsqueeze(1)).sum(0).t()
        out = part if out is None else out + part
    return out


def capacity_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                     top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward (tokens x hidden -> tokens x hidden) through E x C expert slots:
    each token dispatched to its experts' slots, each chunk of experts one batched matmul over its
    slots, the slots' outputs combined back with the routing weights (see CAPACITY)."""
    experts = torch.arange(self.num_experts, device=top_k_index.device)
    picked = (top_k_index.unsqueeze(-1) == experts).to(torch.float32)  # (T, k, E)
    routed = picked.sum(1)  # (T, E): a token picks an expert at most once
    capacity = _capacity(self, routed, top_k_index.shape[-1])
    dispatch = dispatch_slots(routed, capacity)  # (T, E, C)
    weights = (picked * top_k_weights.to(torch.float32).unsqueeze(-1)).sum(1)  # (T, E)
    combine = (dispatch * weights.unsqueeze(-1)).to(hidden_states.dtype)
    dispatch = dispatch.to(hidden_states.dtype)
    tokens, hidden = hidden_states.shape
    out = None
    for c, chunk in enumerate(_chunks(self)):
        size = chunk["down"].shape[0]
        into = dispatch[:, c * size:(c + 1) * size].reshape(tokens, size * capacity)  # (T, e*C)
        back = combine[:, c * size:(c + 1) * size].reshape(tokens, size * capacity)
        if self.is_transposed:  # weights (E, in, out): slots as (e, C, features)
            slots = torch.matmul(into.t(), hidden_states).view(size, capacity, hidden)
            done = _rows_layout(self, slots, chunk).reshape(size * capacity, hidden)
            part = torch.matmul(back, done)  # (T, hidden)
        else:  # weights (E, out, in): slots as (e, features, C), so no weight is ever transposed
            slots = torch.matmul(hidden_states.t(), into).view(hidden, size, capacity).transpose(0, 1)
            done = _columns_layout(self, slots, chunk).transpose(0, 1).reshape(hidden, size * capacity)
            part = torch.matmul(done, back.t()).t()  # (T, hidden)
        out = part if out is None else out + part
    return out


def dispatch_slots(routed: torch.Tensor, capacity: int) -> torch.Tensor:
    """The one-hot dispatch (T, E, C) of `routed` (T, E: 1 where a token picked an expert): a token
    takes the next free slot of each expert it picked, in token order; past `capacity` it gets none."""
    tokens = routed.shape[0]
    order = torch.arange(tokens, device=routed.device)
    earlier = (order.unsqueeze(1) > order).to(torch.float32)  # (T, T): strictly lower triangular
    # each token's place in its experts' queues: a matmul rather than a cumsum (torch-mlir lowers a
    # matmul everywhere), exact in f32 for any count of tokens below 2**24
    place = torch.matmul(earlier, routed.to(torch.float32))  # (T, E)
    slots = torch.arange(capacity, device=routed.device).to(torch.float32)
    return routed.to(torch.float32).unsqueeze(-1) * (place.unsqueeze(-1) == slots)


def _capacity(self: nn.Module, routed: torch.Tensor, top_k: int) -> int:
    """Slots per expert: the largest load when the routing has values (eager, e.g. the framework's
    reference run before an export, which the export then keeps for the same token count); traced
    without values, ceil(tokens * top_k / experts * factor). Never more than the tokens."""
    tokens = routed.shape[0]
    if not (routed.is_meta or is_fake(routed)):
        self.opbyop_load = (tokens, max(1, int(routed.sum(0).max())))
    measured = getattr(self, "opbyop_load", None)
    if measured is not None and measured[0] == tokens:
        return measured[1]
    factor = getattr(self, "opbyop_capacity_factor", CAPACITY_FACTOR)
    return min(tokens, max(1, math.ceil(tokens * top_k / self.num_experts * factor)))


def _chunks(self: nn.Module) -> list[dict[str, torch.Tensor]]:
    """The experts' weights chunk by chunk: {up, up_bias?, down, down_bias?} each."""
    if hasattr(self, "opbyop_chunks"):
        return [dict(chunk) for chunk in self.opbyop_chunks]
    return [_weights(self)]


def _weights(self: nn.Module) -> dict[str, torch.Tensor]:
    up = "gate_up_proj" if self.has_gate else "up_proj"
    weights = {"up": getattr(self, up), "down": self.down_proj}
    if self.has_bias:
        weights |= {"up_bias": getattr(self, f"{up}_bias"), "down_bias": self.down_proj_bias}
    return weights


def _rows_layout(self: nn.Module, x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """(E, T, hidden) from x (1 or E, T, hidden), for weights stored (E, in, out), e.g. gpt-oss."""
    proj = torch.matmul(x, w["up"])  # (E, T, N)
    if "up_bias" in w:
        proj = proj + w["up_bias"].unsqueeze(1)
    proj = self._apply_gate(proj) if self.has_gate else self.act_fn(proj)
    out = torch.matmul(proj, w["down"])  # (E, T, hidden)
    if "down_bias" in w:
        out = out + w["down_bias"].unsqueeze(1)
    return self.post_expert_norm(out) if self.has_post_expert_norm else out


def _columns_layout(self: nn.Module, xt: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """(E, hidden, T) from xt ([E,] hidden, T), for weights stored (E, out, in), e.g. Qwen3-MoE, Mixtral,
    DeepSeek."""
    proj = torch.matmul(w["up"], xt)  # (E, N, T)
    if "up_bias" in w:
        proj = proj + w["up_bias"].unsqueeze(-1)
    if not self.has_gate:
        proj = self.act_fn(proj)
    elif type(self)._apply_gate is _default_apply_gate:  # gate and up halves along the features
        gate, value = proj.chunk(2, dim=1)
        proj = self.act_fn(gate) * value
    else:  # a gate of the model's own reads the features last
        proj = self._apply_gate(proj.transpose(1, 2)).transpose(1, 2)
    out = torch.matmul(w["down"], proj)  # (E, hidden, T)
    if "down_bias" in w:
        out = out + w["down_bias"].unsqueeze(-1)
    if self.has_post_expert_norm:
        out = self.post_expert_norm(out.transpose(1, 2)).transpose(1, 2)
    return out


def chunk_size(module: nn.Module, budget: int = CHUNK_BYTES) -> int:
    """The most experts per chunk (a divisor of their number) whose largest weight fits `budget` bytes."""
    per_expert = max(w[0].numel() * w.element_size() for w in _weights(module).values() if w.dim() == 3)
    count = module.num_experts
    return max(d for d in range(1, count + 1) if count % d == 0 and (d == 1 or d * per_expert <= budget))


def chunk_experts(module: nn.Module, size: int) -> None:
    """Hold `module`'s expert weights as chunks of `size` experts, each its own parameter (its own
    @main argument once exported: no op ever takes the whole layer's weights)."""
    if hasattr(module, "opbyop_chunks") or size >= module.num_experts:
        return
    weights = _weights(module)
    module.opbyop_chunks = nn.ModuleList()
    for start in range(0, module.num_experts, size):
        chunk = nn.ParameterDict({k: nn.Parameter(w[start:start + size].clone(), requires_grad=False)
                                  for k, w in weights.items()})
        module.opbyop_chunks.append(chunk)
    for name in ("gate_up_proj", "up_proj", "down_proj", "gate_up_proj_bias", "up_proj_bias", "down_proj_bias"):
        if name in module._parameters:
            del module._parameters[name]


ALL_EXPERTS_FUNCTIONS.register(FORMS[EVERY_EXPERT], every_expert_forward)
ALL_EXPERTS_FUNCTIONS.register(FORMS[GROUPED], grouped_mm_experts_forward)
ALL_EXPERTS_FUNCTIONS.register(FORMS[CAPACITY], capacity_forward)


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The model's experts modules that run through transformers' experts interface."""
    return [m for m in model.modules() if hasattr(m, "has_gate") and hasattr(m, "_is_expert_parallel")]


def parse_form(form: str) -> tuple[str, float | None]:
    """(one of FORMS, the capacity factor) from a form's name: capacity-2 is the capacity form with
    factor 2, capacity alone CAPACITY_FACTOR; the other forms have no factor."""
    name, _, factor = form.partition("-") if form.startswith(f"{CAPACITY}-") else (form, "", "")
    try:
        value = float(factor) if factor else CAPACITY_FACTOR if name == CAPACITY else None
    except ValueError:
        value = None
    if name not in FORMS or (name == CAPACITY and (value is None or not value > 0)):
        raise ValueError(f"unknown experts form {form!r}: one of {', '.join(FORMS)} "
                         f"({CAPACITY}-FACTOR for a capacity factor other than {CAPACITY_FACTOR:g}, e.g. {CAPACITY}-2)")
    return name, value


def use_expert_form(model: nn.Module, form: str | None = None, keep_chosen: bool = False,
                    budget: int = CHUNK_BYTES) -> str | None:
    """Export `model`'s experts in `form` (one of FORMS, or capacity-FACTOR; DEFAULT_FORM if None;
    every-expert and capacity in chunks of at most `budget` bytes per weight); the form its experts run
    in, or None without experts. `keep_chosen`: only experts left at transformers' default change form."""
    name, factor = parse_form(form or DEFAULT_FORM)
    # decided before any change: the experts of a model share one configuration
    chosen = [m for m in expert_modules(model)
              if not keep_chosen or m.config._experts_implementation in TRANSFORMERS_DEFAULTS]
    for module in chosen:
        module.config._experts_implementation = FORMS[name]
        if name in (EVERY_EXPERT, CAPACITY):
            chunk_experts(module, chunk_size(module, budget))
        if factor is not None:
            module.opbyop_capacity_factor = factor
    return expert_form(model)


def expert_form(model: nn.Module) -> str | None:
    """The form `model`'s experts are exported in (None without experts; transformers' own name for a
    form opbyop does not know): capacity-FACTOR, or capacity-max-load once a forward with values
    measured the load its export keeps."""
    known = {key: form for form, key in FORMS.items()}
    names = sorted({_form_name(known.get(m.config._experts_implementation, m.config._experts_implementation), m)
                    for m in expert_modules(model)})
    return ", ".join(names) or None


def _form_name(form: str | None, module: nn.Module) -> str:
    if form != CAPACITY:
        return str(form)
    if hasattr(module, "opbyop_load"):
        return f"{CAPACITY}-{MEASURED}"
    return f"{CAPACITY}-{getattr(module, 'opbyop_capacity_factor', CAPACITY_FACTOR):g}"
