"""Decompositions opbyop adds to torch-mlir's table: framework ops torch-mlir has no lowering for,
written with ops it lowers, so the model's graph keeps them instead of cutting them out.

`aten._grouped_mm` (mixture-of-experts layers run their experts with it, e.g. transformers' Mixtral
and Qwen-MoE; transformers' own `transformers::grouped_mm_fallback` custom op where torch's kernel
cannot be used, same operands) multiplies consecutive row groups of its first operand, each by its own matrix; the
groups' ends (`offs`) are tensor values. A static-shape form: every row against every group's matrix
(one batched matmul), then each row's own group picked by a gather. It costs E times the matmul's
work but keeps every shape static; the experts' matmuls are analysed, at the shapes of that form.
A form this module does not know returns NotImplemented: the op stays and is cut out as before.

`aten.slice_scatter` (a write into a slice, `out[..., :8].copy_(a)`, after functionalisation) makes
torch-mlir's StableHLO lowering grow without end, or fail its own verifier when strided. Written
with slices, reshapes and one concatenation instead, exactly: the untouched parts of the input
around the source; for a step > 1, the span the slice covers viewed as (count, step) rows whose
first column becomes the source.

`aten.topk` with `sorted=False` (DeepSeek's routers) is refused by torch-mlir's lowering; the order
of an unsorted top-k is unspecified, so the sorted one is a valid result of it.

An uninitialised tensor (`torch.empty`, `new_empty`: DeepSeek-V2's key states, written part by part
afterwards) becomes torch-mlir's `tensor.empty`, which is no StableHLO op: its own op module fails in
the compiler's front end, a failure of no op of the model's. Any value is a valid value of an empty
tensor: it is made as zeros.

`aten._assert_tensor_metadata` (torch.export's check of a `.to()`) computes nothing; torch-mlir
refuses it on a complex tensor. It is dropped.

Complex tensors (a rotary embedding written with `torch.polar`, `view_as_complex`, a complex
product and `view_as_real`, as DeepSeek-V2 does) have no StableHLO lowering in torch-mlir. The
complex ops here are written on the tensor's real view (a trailing dimension of 2: real, imaginary)
and wrapped back with `view_as_complex`; `fold_complex_views` then removes each
`view_as_real(view_as_complex(x))`, so a chain that starts and ends in real tensors keeps no complex
value. An op on complex values not written here keeps its complex operands and is cut out as before.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten


def _row_groups(offs: torch.Tensor, rows: int, groups: int) -> torch.Tensor:
    """Each row's group: how many group ends lie at or before it (rows past the last end: the last group)."""
    index = torch.arange(rows, device=offs.device, dtype=offs.dtype)
    return (index[:, None] >= offs[None, :]).sum(-1).clamp(max=groups - 1)


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> Any:
    """aten._grouped_mm in static shapes: (S,K) x (E,K,N) by row groups, (S,K) x (K,N) by groups of K
    (the weight-gradient form), (E,S,K) x (E,K,N) batched."""
    if a.dim() == 3 and b.dim() == 3 and offs is None:
        out = torch.bmm(a, b)
    elif a.dim() == 2 and b.dim() == 3 and offs is not None:
        rows, groups = a.shape[0], b.shape[0]
        every = torch.matmul(a.unsqueeze(0), b)  # (E, S, N): each row against each group's matrix
        group = _row_groups(offs, rows, groups)
        out = torch.gather(every, 0, group.view(1, rows, 1).expand(1, rows, every.shape[-1])).squeeze(0)
        if bias is not None:
            out = out + bias[group]
            bias = None
    elif a.dim() == 2 and b.dim() == 2 and offs is not None:
        depth, groups = a.shape[1], offs.shape[0]
        mine = _row_groups(offs, depth, groups)  # each k's group
        mask = (mine[None, :] == torch.arange(groups, device=a.device)[:, None]).to(a.dtype)  # (E, K)
        out = torch.matmul(a.unsqueeze(0) * mask[:, None, :], b)  # (E, M, N): group g's k only
    else:
        return NotImplemented
    if bias is not None:
        out = out + bias
    return out.to(out_dtype) if out_dtype is not None else out


def _bounds(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Python's slice bounds: negative from the end, clamped into [0, size], end at least start."""
    def clamp(value: int | None, lower: int, default: int) -> int:
        if value is None:
            return default
        return min(max(value + size if value < 0 else value, lower), size)

    first = clamp(start, 0, 0)
    return first, clamp(end, first, size)


def slice_scatter(input: torch.Tensor, src: torch.Tensor, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Any:
    """aten.slice_scatter (input with input[start:end:step] along dim replaced by src) as slices,
    reshapes and a concatenation."""
    if not all(isinstance(v, int) for v in (*input.shape, start or 0, end or 0, step)):
        return NotImplemented  # symbolic sizes: the bounds are not known here
    dim = dim % input.dim()
    size = input.shape[dim]
    start, end = _bounds(size, start, end)
    count = src.shape[dim]  # == len(range(start, end, step))
    if count == 0:
        return input.clone()
    if step == 1:
        middle = [src]
    else:  # rows of `step` from start: each row's first element is the source's, the rest stay
        rows = count - 1
        middle = [src.narrow(dim, rows, 1)]  # the last element written has no full row after it
        if rows:
            span = input.narrow(dim, start, rows * step)
            shape = list(input.shape)
            grid = span.reshape(shape[:dim] + [rows, step] + shape[dim + 1:])
            grid = torch.cat([src.narrow(dim, 0, rows).unsqueeze(dim + 1), grid.narrow(dim + 1, 1, step - 1)], dim + 1)
            middle.insert(0, grid.reshape(shape[:dim] + [rows * step] + shape[dim + 1:]))
    written = start + (count - 1) * step + 1  # one past the last element written
    parts = ([input.narrow(dim, 0, start)] if start else []) + middle \
        + ([input.narrow(dim, written, size - written)] if written < size else [])
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0].clone()


def topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """aten.topk with sorted=False as the sorted top-k (one of the orders an unsorted top-k may give)."""
    return NotImplemented if sorted else aten.topk.default(input, k, dim, largest, True)


def _zeros(size: list[int], dtype: torch.dtype | None, layout: Any, device: Any) -> torch.Tensor:
    # a scalar broadcast: aten.full and aten.zeros are decomposed through aten.empty again
    return aten.scalar_tensor.default(0, dtype=dtype, layout=layout, device=device).expand(size).clone()


def empty(size: list[int], dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
          pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:
    """aten.empty as zeros (any value is one an empty tensor may hold)."""
    return _zeros(size, dtype, layout, device)


def empty_strided(size: list[int], stride: list[int], dtype: torch.dtype | None = None, layout: Any = None,
                  device: Any = None, pin_memory: Any = None) -> torch.Tensor:
    """aten.empty_strided as zeros: the values are the op's, the strides torch's own business."""
    return _zeros(size, dtype, layout, device)


def assert_tensor_metadata(*args: Any, **kwargs: Any) -> None:
    """aten._assert_tensor_metadata: a check torch.export made, nothing computed."""
    return None


def _pairs(t: Any) -> Any:
    """A complex tensor's real view (..., 2); anything else as it is."""
    return aten.view_as_real.default(t) if isinstance(t, torch.Tensor) and t.is_complex() else t


def _complex(pairs: torch.Tensor) -> torch.Tensor:
    return aten.view_as_complex.default(pairs.contiguous())


def _is_complex(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_complex()


def polar(abs: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """aten.polar: abs * (cos angle + i sin angle)."""
    return _complex(torch.stack([abs * torch.cos(angle), abs * torch.sin(angle)], -1))


def complex_(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    """aten.complex: real + i imag."""
    return _complex(torch.stack(torch.broadcast_tensors(real, imag), -1))


def mul(a: Any, b: Any) -> Any:
    """aten.mul where an operand is complex: (ar + i ai)(br + i bi), or each part times a real."""
    if not (_is_complex(a) or _is_complex(b)) or isinstance(a, complex) or isinstance(b, complex):
        return NotImplemented
    if _is_complex(a) and _is_complex(b):
        x, y = _pairs(a), _pairs(b)
        ar, ai, br, bi = x[..., 0], x[..., 1], y[..., 0], y[..., 1]
        return _complex(torch.stack([ar * br - ai * bi, ar * bi + ai * br], -1))
    z, r = (a, b) if _is_complex(a) else (b, a)
    return _complex(_pairs(z) * (r.unsqueeze(-1) if isinstance(r, torch.Tensor) else r))


def add(a: Any, b: Any, alpha: Any = 1) -> Any:
    """aten.add of two complex tensors: part by part."""
    if not (_is_complex(a) and _is_complex(b)) or isinstance(alpha, complex):
        return NotImplemented
    return _complex(_pairs(a) + _pairs(b) * alpha)


def sub(a: Any, b: Any, alpha: Any = 1) -> Any:
    """aten.sub of two complex tensors: part by part."""
    if not (_is_complex(a) and _is_complex(b)) or isinstance(alpha, complex):
        return NotImplemented
    return _complex(_pairs(a) - _pairs(b) * alpha)


def unsqueeze(input: torch.Tensor, dim: int) -> Any:
    """aten.unsqueeze of a complex tensor: on its real view, the new axis before the pair's."""
    if not _is_complex(input):
        return NotImplemented
    return _complex(_pairs(input).unsqueeze(dim % (input.dim() + 1)))


def view(input: torch.Tensor, size: list[int]) -> Any:
    """aten.view of a complex tensor: its real view reshaped, the pair kept last."""
    if not _is_complex(input):
        return NotImplemented
    return _complex(_pairs(input).reshape([*size, 2]))


def expand(input: torch.Tensor, size: list[int], implicit: bool = False) -> Any:
    """aten.expand of a complex tensor: its real view expanded, the pair kept last."""
    if not _is_complex(input):
        return NotImplemented
    return _complex(_pairs(input).expand([*size, 2]))


def clone(input: torch.Tensor, memory_format: Any = None) -> Any:
    if not _is_complex(input):
        return NotImplemented
    return _complex(_pairs(input).clone())


def fold_complex_views(graph: torch.fx.Graph) -> int:
    """Each view_as_real(view_as_complex(x)) replaced by x, and each view_as_complex left unused
    removed: the complex decompositions' wrappers cancel out. How many were folded."""
    folded = 0
    for node in list(graph.nodes):
        source = node.args[0] if node.target is aten.view_as_real.default else None
        if isinstance(source, torch.fx.Node) and source.target is aten.view_as_complex.default:
            node.replace_all_uses_with(source.args[0])
            graph.erase_node(node)
            folded += 1
    for node in reversed(list(graph.nodes)):  # wrappers whose only users were folded, innermost last
        if node.target is aten.view_as_complex.default and not node.users:
            graph.erase_node(node)
    return folded


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The table, read when a model is exported: transformers registers its custom op on import."""
    table: dict[Any, Callable[..., Any]] = {
        aten._grouped_mm.default: grouped_mm, aten.slice_scatter.default: slice_scatter, aten.topk.default: topk,
        aten._assert_tensor_metadata.default: assert_tensor_metadata, aten.polar.default: polar,
        aten.complex.default: complex_, aten.mul.Tensor: mul, aten.add.Tensor: add, aten.sub.Tensor: sub,
        aten.unsqueeze.default: unsqueeze, aten.view.default: view, aten.expand.default: expand,
        aten.clone.default: clone, aten.empty.memory_format: empty, aten.empty_strided.default: empty_strided}
    fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    if fallback is not None and hasattr(fallback, "default"):
        table[fallback.default] = grouped_mm
    return table
