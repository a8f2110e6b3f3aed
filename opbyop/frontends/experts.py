"""The form in which a mixture-of-experts layer's experts are exported.

transformers runs a model's experts through an interface (`config._experts_implementation`): 'eager'
loops over the experts hit (data-dependent: torch.export cannot keep it), 'grouped_mm' sorts the
tokens*top_k routed rows by expert and multiplies consecutive row groups (a ragged matmul whose group
ends are tensor values; opbyop's static-shape decomposition multiplies every routed row by every
expert: experts*tokens*top_k rows), 'batched_mm' gathers each routed row's own weight matrix (a gather
of tokens*top_k weight matrices, more bytes than the whole layer).

EVERY_EXPERT, the form opbyop exports: every expert over each token once, then each token's outputs
combined with its routing weights (zero for the experts it did not pick). Shapes are static, there is
no gather and no sort; a token picks an expert at most once, so nothing is dropped and the result is
the model's. Its work is experts*tokens rows: top_k times less than the grouped form's decomposition,
and the arithmetic of a dense feed-forward layer as wide as all the experts. A form proportional to
the routed rows alone (tokens*top_k) needs a weight gather per block of rows, whose output is at least
the whole layer's weights (any expert may be hit): an op larger than the layer, where every-expert's
largest op is one chunk's.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, _default_apply_gate, grouped_mm_experts_forward

EVERY_EXPERT = "every-expert"  # the form's name, as a model's tag records it (experts:every-expert)
GROUPED = "grouped-dense"  # transformers' grouped_mm, decomposed to every routed row x every expert
# Their keys in transformers' experts interface: the grouped form under a name of opbyop's own, so that
# a model asking for it is told apart from one left at transformers' default.
FORMS = {EVERY_EXPERT: "opbyop_every_expert", GROUPED: "opbyop_grouped"}
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
            part = (_rows_layout(self, hidden_states, weights) * share.unsqueeze(-1)).sum(0)
        else:  # weights (E, out, in): activations as (E, features, T), so no weight is ever transposed
            part = (_columns_layout(self, hidden_states, weights) * share.unsqueeze(1)).sum(0).t()
        out = part if out is None else out + part
    return out


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
    """(E, T, hidden) for weights stored (E, in, out), e.g. gpt-oss."""
    proj = torch.matmul(x.unsqueeze(0), w["up"])  # (E, T, N)
    if "up_bias" in w:
        proj = proj + w["up_bias"].unsqueeze(1)
    proj = self._apply_gate(proj) if self.has_gate else self.act_fn(proj)
    out = torch.matmul(proj, w["down"])  # (E, T, hidden)
    if "down_bias" in w:
        out = out + w["down_bias"].unsqueeze(1)
    return self.post_expert_norm(out) if self.has_post_expert_norm else out


def _columns_layout(self: nn.Module, x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """(E, hidden, T) for weights stored (E, out, in), e.g. Qwen3-MoE, Mixtral, DeepSeek."""
    proj = torch.matmul(w["up"], x.t())  # (E, N, T)
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


def expert_modules(model: nn.Module) -> list[nn.Module]:
    """The model's experts modules that run through transformers' experts interface."""
    return [m for m in model.modules() if hasattr(m, "has_gate") and hasattr(m, "_is_expert_parallel")]


def use_expert_form(model: nn.Module, form: str = EVERY_EXPERT, keep_chosen: bool = False,
                    budget: int = CHUNK_BYTES) -> str | None:
    """Export `model`'s experts in `form` (one of FORMS; every-expert in chunks of at most `budget`
    bytes per weight); the form its experts run in, or None without experts. `keep_chosen`: only
    experts left at transformers' default change form."""
    if form not in FORMS:
        raise ValueError(f"unknown experts form {form!r}: one of {', '.join(FORMS)}")
    # decided before any change: the experts of a model share one configuration
    chosen = [m for m in expert_modules(model)
              if not keep_chosen or m.config._experts_implementation in TRANSFORMERS_DEFAULTS]
    for module in chosen:
        module.config._experts_implementation = FORMS[form]
        if form == EVERY_EXPERT:
            chunk_experts(module, chunk_size(module, budget))
    return expert_form(model)


def expert_form(model: nn.Module) -> str | None:
    """The form `model`'s experts are exported in (None without experts; transformers' own name for a
    form opbyop does not know)."""
    known = {key: form for form, key in FORMS.items()}
    names = sorted({str(known.get(m.config._experts_implementation, m.config._experts_implementation))
                    for m in expert_modules(model)})
    return ", ".join(names) or None
