"""Run tt-mlir's TTNN programs through tt-metal's own ttnn, op by op, on a ttsim device.

This file runs in its OWN interpreter (Python 3.12 with PyPI's `ttnn`, which pins numpy < 2 and
ships cp310/cp312 wheels only), never inside opbyop: it imports only the standard library, numpy
and ttnn. opbyop (opbyop.device.ttsim.backend) starts it as `python runner.py SFPI_DIR` with
tt-metal's simulator environment (`python runner.py SFPI_DIR ROWSxCOLS` opens a mesh of a multichip
ttsim instead of one chip) and talks to it over stdin / a private pipe:

  request  (one JSON line): {"dir": DIR, "report": BOOL}  DIR holds plan.json (the program,
                            opbyop.device.ttsim.plan) and inputs.npz (in0, in1 ...; constants as c<fn>_<op>)
  reply    (one JSON line): {"ok": true, "seconds": S, "ops": N, "peak_l1_bytes": ...}   outputs.npz (out0 ...)
                                                                          in DIR, and observed.npz (the
                            output of each op the plan marks `observe`, in any function, under that key,
                            in the order of their last runs)
                            with "report": true, also "report": "ttnn-report" (ttnn's own TT-NN Visualizer
                            report of the run, DIR/ttnn-report/db.sqlite) or "report_error": TEXT
                            {"ok": false, "kind": KIND, "op": OP, "message": TEXT}

KIND says whose the failure is: "rejected" (tt-metal refused the op: TT_FATAL, TT_THROW, a kernel
that did not compile, the allocator), "unmapped" (an op kind this runner has no ttnn call for),
"mapping" (this runner built a call ttnn does not accept: opbyop's bug). ttsim itself ends the
process on a feature it does not model (`UnsupportedFunctionality`): the caller reads that from the
process's stderr. The device stays open between requests: kernels compile once per process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np


def _link_sfpi(sfpi: str) -> None:
    """ttnn's kernel JIT looks for the RISC-V toolchain in its own package (it ships none). The link
    is replaced in one step: another runner's kernel build may be using it."""
    spec = importlib.util.find_spec("ttnn")
    if spec is None or spec.origin is None or not sfpi:
        return
    target = Path(spec.origin).parent / "runtime" / "sfpi"
    if target.exists() and not target.is_symlink():
        return  # a toolchain of ttnn's own
    if not target.is_symlink() or target.resolve() != Path(sfpi).resolve():
        target.parent.mkdir(parents=True, exist_ok=True)
        new = target.with_name(f"sfpi.{os.getpid()}")
        new.unlink(missing_ok=True)
        new.symlink_to(sfpi, target_is_directory=True)
        os.replace(new, target)


# The protocol gets its own pipe: tt-metal and ttsim print to fd 1, which goes to stderr instead.
_PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
if __name__ == "__main__":
    _link_sfpi(sys.argv[1] if len(sys.argv) > 1 else "")

import ttnn  # noqa: E402  (after the toolchain link and the fd switch)
from ttnn._ttnn.activation import EltwiseUnaryWithParam  # noqa: E402
from ttnn.graph_report import import_report  # noqa: E402


class Unmapped(Exception):
    """No ttnn call for this TTNN op kind."""


DTYPES = {"f32": ttnn.float32, "bf16": ttnn.bfloat16, "si32": ttnn.int32, "u32": ttnn.uint32,
          "u16": ttnn.uint16, "u8": ttnn.uint8, "bfp_bf8": ttnn.bfloat8_b, "bfp_bf4": ttnn.bfloat4_b,
          "i1": ttnn.bfloat16}
HOST_NUMPY = {"f32": np.float32, "bf16": np.float32, "si32": np.int32, "u32": np.uint32, "u16": np.uint16,
              "u8": np.uint8, "bfp_bf8": np.float32, "bfp_bf4": np.float32, "i1": np.float32}
FIDELITY = {"lofi": ttnn.MathFidelity.LoFi, "hifi2": ttnn.MathFidelity.HiFi2, "hifi3": ttnn.MathFidelity.HiFi3,
            "hifi4": ttnn.MathFidelity.HiFi4}
MEMORY_LAYOUTS = {"interleaved": ttnn.TensorMemoryLayout.INTERLEAVED,
                  "height_sharded": ttnn.TensorMemoryLayout.HEIGHT_SHARDED,
                  "width_sharded": ttnn.TensorMemoryLayout.WIDTH_SHARDED,
                  "block_sharded": ttnn.TensorMemoryLayout.BLOCK_SHARDED}


# --- tensors and their layouts ------------------------------------------------------------------

def memory_config(layout: dict | None):
    if layout is None or layout["buffer"] == "system_memory":
        return None
    buffer = ttnn.BufferType.L1 if layout["buffer"] == "l1" else ttnn.BufferType.DRAM
    kind = layout.get("memory_layout") or "interleaved"
    if kind != "interleaved":
        raise Unmapped(f"sharded memory ({kind}) is not mapped to ttnn yet")
    return ttnn.MemoryConfig(MEMORY_LAYOUTS[kind], buffer)


def ttnn_dtype(fmt: str):
    """ttnn's DataType of a storage format; ttnn has none for f16 (tt-metal holds no fp16 tensor)."""
    if fmt not in DTYPES:
        raise Unmapped(f"ttnn 0.81.1 has no data type for {fmt} tensors (its DataType holds bf16, f32, block "
                       "floats and integers)")
    return DTYPES[fmt]


def conform(x, ttype: dict, device):
    """`x` in the layout, data type and memory the program's type says (ttnn.to_layout's meaning)."""
    layout = ttype.get("layout")
    if layout is None:
        return x
    on_host = layout["buffer"] == "system_memory"
    if not on_host and x.storage_type() == ttnn.StorageType.HOST and layout["tiled"] and \
            ttnn_dtype(layout["dtype"]) in (ttnn.bfloat8_b, ttnn.bfloat4_b):
        x = ttnn.to_layout(x, ttnn.TILE_LAYOUT)
    if x.storage_type() != ttnn.StorageType.HOST and on_host:
        x = ttnn.from_device(x)
    want_dtype = ttnn_dtype(layout["dtype"])
    want_layout = ttnn.TILE_LAYOUT if layout["tiled"] else ttnn.ROW_MAJOR_LAYOUT
    if x.storage_type() == ttnn.StorageType.HOST:
        if x.dtype != want_dtype:
            x = ttnn.to_dtype(x, want_dtype)
        if x.layout != want_layout:
            x = ttnn.to_layout(x, want_layout)
        if not on_host:
            x = ttnn.to_device(x, device, memory_config=memory_config(layout))
        return x
    if x.layout != want_layout and want_dtype not in (ttnn.bfloat8_b, ttnn.bfloat4_b):
        x = ttnn.to_layout(x, want_layout)
    if x.dtype != want_dtype:
        x = ttnn.typecast(x, want_dtype)
    if x.layout != want_layout:
        x = ttnn.to_layout(x, want_layout)
    mc = memory_config(layout)
    if mc is not None and x.memory_config() != mc:
        x = ttnn.to_memory_config(x, mc)
    return x


def host_tensor(value: np.ndarray, ttype: dict):
    """A row-major host tensor of the argument's element type (`conform` moves it where it goes);
    block floats are staged as f32, which tt-metal packs when it tilizes them."""
    fmt = (ttype.get("layout") or {}).get("dtype") or ttype["dtype"]
    array = np.ascontiguousarray(value, dtype=HOST_NUMPY.get(fmt, np.float32)).reshape(value.shape or (1,))
    dtype = DTYPES.get(fmt, ttnn.float32)
    return ttnn.Tensor(array, ttnn.float32 if dtype in (ttnn.bfloat8_b, ttnn.bfloat4_b) else dtype)


def to_numpy(x, ttype: dict) -> np.ndarray:
    """The tensor's values on the host, in the program's shape (bf16 and block floats read as f32)."""
    if x.storage_type() != ttnn.StorageType.HOST:
        x = ttnn.from_device(x)
    if x.layout != ttnn.ROW_MAJOR_LAYOUT:
        x = ttnn.to_layout(x, ttnn.ROW_MAJOR_LAYOUT)
    if x.dtype in (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.bfloat4_b):
        x = ttnn.to_dtype(x, ttnn.float32)
    out = np.asarray(x.to_numpy())
    return out.reshape(tuple(ttype["shape"]))


# --- op kinds ------------------------------------------------------------------------------------

class Ctx:
    """What an op's handler sees: its tensor operands, attributes, result types and the device."""

    def __init__(self, op: dict, args: list, device, constants: dict):
        self.op, self.args, self.device, self.attrs = op, args, device, op.get("attrs") or {}
        self.constants = constants
        self.result_types = op["result_types"]

    @property
    def out(self) -> dict:
        return self.result_types[0]

    def mc(self):
        return memory_config(self.out.get("layout"))

    def layout(self):
        """Tile or row-major, as the result's type says."""
        return ttnn.TILE_LAYOUT if (self.out.get("layout") or {}).get("tiled") else ttnn.ROW_MAJOR_LAYOUT

    def dtype(self):
        layout = self.out.get("layout")
        return ttnn_dtype(layout["dtype"]) if layout else None

    def compute_config(self):
        cfg = self.attrs.get("compute_config")
        if not isinstance(cfg, dict):
            return None
        kw = {"fp32_dest_acc_en": bool(cfg.get("fp32_dest_acc_en", False)),
              "math_approx_mode": bool(cfg.get("math_approx_mode", False)),
              "packer_l1_acc": bool(cfg.get("packer_l1_acc", False))}
        if cfg.get("math_fidelity") in FIDELITY:
            kw["math_fidelity"] = FIDELITY[cfg["math_fidelity"]]
        if "dst_full_sync_en" in cfg:
            kw["dst_full_sync_en"] = bool(cfg["dst_full_sync_en"])
        return ttnn.WormholeComputeKernelConfig(**kw)


def _unary(name: str):
    def run(c: Ctx):
        return getattr(ttnn, name)(c.args[0], memory_config=c.mc())
    return run


def activations(attrs: dict, key: str) -> list:
    """`[#ttnn.unary_with_param<op_type = relu, params = [..]>]` as tt-metal's EltwiseUnaryWithParam list."""
    out = []
    for entry in attrs.get(key) or []:
        if not isinstance(entry, dict) or "op_type" not in entry:
            raise Unmapped(f"the fused activation {entry!r} is not mapped to ttnn yet")
        op_type = getattr(ttnn.UnaryOpType, str(entry["op_type"]).upper(), None)
        if op_type is None:
            raise Unmapped(f"the fused activation {entry['op_type']} has no ttnn.UnaryOpType")
        params = entry.get("params") or []
        out.append(EltwiseUnaryWithParam(op_type, *[float(p) for p in (params if isinstance(params, list) else [params])]))
    return out


# ttnn's binary calls that take no output dtype (theirs is the first operand's)
NO_DTYPE = {"logical_left_shift", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
            "bitwise_right_shift"}


def _binary(name: str):
    def run(c: Ctx):
        dtype = {} if name in NO_DTYPE else {"dtype": c.dtype()}
        return getattr(ttnn, name)(c.args[0], c.args[1], **dtype, memory_config=c.mc(),
                                   activations=activations(c.attrs, "activations"),
                                   input_tensor_a_activations=activations(c.attrs, "input_tensor_a_activations"),
                                   input_tensor_b_activations=activations(c.attrs, "input_tensor_b_activations"))
    return run


def _reduction(name: str):
    def run(c: Ctx):
        dims = c.attrs.get("dim_arg")
        dims = list(dims) if isinstance(dims, list) else ([dims] if dims is not None else None)
        return getattr(ttnn, name)(c.args[0], dim=dims, keepdim=bool(c.attrs.get("keep_dim", False)),
                                   memory_config=c.mc())
    return run


def _coord(value) -> "ttnn.CoreCoord":
    return ttnn.CoreCoord(int(value[0]), int(value[1]))


def matmul_program_config(attrs: dict):
    """The compiler's own matmul program config, as tt-metal's class of the same name."""
    cfg = attrs.get("matmul_program_config")
    if not isinstance(cfg, dict):
        return None
    common = dict(compute_with_storage_grid_size=_coord(cfg["compute_with_storage_grid_size"]),
                  in0_block_w=cfg["in0_block_w"], out_subblock_h=cfg["out_subblock_h"],
                  out_subblock_w=cfg["out_subblock_w"], out_block_h=cfg.get("out_block_h"),
                  out_block_w=cfg.get("out_block_w"), per_core_M=cfg["per_core_m"], per_core_N=cfg["per_core_n"])
    if "mcast_in0" in cfg:
        return ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig(
            **common, fuse_batch=bool(cfg.get("fuse_batch", False)), mcast_in0=bool(cfg["mcast_in0"]),
            gather_in0=bool(cfg.get("gather_in0", False)), untilize_out=bool(cfg.get("untilize_out", False)),
            num_global_cb_receivers=int(cfg.get("num_global_cb_receivers", 0)) or 1)
    if "transpose_mcast" in cfg:
        return ttnn.MatmulMultiCoreReuseMultiCastProgramConfig(
            **common, transpose_mcast=bool(cfg["transpose_mcast"]), fuse_batch=bool(cfg.get("fuse_batch", True)))
    if set(cfg) <= {"compute_with_storage_grid_size", "in0_block_w", "out_subblock_h", "out_subblock_w",
                    "per_core_m", "per_core_n"}:
        return ttnn.MatmulMultiCoreReuseProgramConfig(
            compute_with_storage_grid_size=common["compute_with_storage_grid_size"], in0_block_w=cfg["in0_block_w"],
            out_subblock_h=cfg["out_subblock_h"], out_subblock_w=cfg["out_subblock_w"],
            per_core_M=cfg["per_core_m"], per_core_N=cfg["per_core_n"])
    raise Unmapped(f"matmul program config {sorted(cfg)} is not mapped to ttnn yet")


def _matmul(c: Ctx):
    if c.attrs.get("activation"):
        raise Unmapped(f"a matmul's fused activation ({c.attrs['activation']}) is not mapped to ttnn yet")
    kw = dict(transpose_a=bool(c.attrs.get("transpose_a", False)), transpose_b=bool(c.attrs.get("transpose_b", False)),
              memory_config=c.mc(), dtype=c.dtype(), program_config=matmul_program_config(c.attrs),
              compute_kernel_config=c.compute_config())
    if len(c.args) > 2:
        return ttnn.linear(c.args[0], c.args[1], bias=c.args[2], **kw)
    return ttnn.matmul(c.args[0], c.args[1], **kw)


CONV_CONFIG_KEYS = {"weights_dtype", "deallocate_activation", "reallocate_halo_output", "config_tensors_in_dram",
                    "act_block_h_override", "act_block_w_div", "reshard_if_not_optimal", "override_sharding_config",
                    "transpose_shards", "enable_act_double_buffer", "enable_weights_double_buffer", "full_inner_dim",
                    "enable_kernel_stride_folding", "enable_activation_reuse", "force_split_reader"}


def conv2d_config(attrs: dict):
    """The compiler's conv2d_config, field by field (the ones tt-metal's Conv2dConfig takes as they are)."""
    cfg = attrs.get("conv2d_config")
    if not isinstance(cfg, dict):
        return None
    unknown = set(cfg) - CONV_CONFIG_KEYS - {"activation", "shard_layout", "core_grid", "output_layout"}
    if unknown or cfg.get("activation") or cfg.get("shard_layout") or cfg.get("core_grid"):
        raise Unmapped(f"conv2d_config fields {sorted(set(cfg) - CONV_CONFIG_KEYS)} are not mapped to ttnn yet")
    kw = {k: v for k, v in cfg.items() if k in CONV_CONFIG_KEYS and k != "weights_dtype"}
    if "weights_dtype" in cfg:
        kw["weights_dtype"] = DTYPES[str(cfg["weights_dtype"])]
    return ttnn.Conv2dConfig(**kw)


def _conv2d(c: Ctx):
    a = c.attrs
    return ttnn.conv2d(input_tensor=c.args[0], weight_tensor=c.args[1], device=c.device,
                       in_channels=int(a["in_channels"]), out_channels=int(a["out_channels"]),
                       batch_size=int(a["batch_size"]), input_height=int(a["input_height"]),
                       input_width=int(a["input_width"]), kernel_size=_ints(a["kernel_size"]),
                       stride=_ints(a["stride"]), padding=_ints(a["padding"]), dilation=_ints(a["dilation"]),
                       groups=int(a["groups"]), bias_tensor=c.args[2] if len(c.args) > 2 else None,
                       conv_config=conv2d_config(a), compute_config=c.compute_config(), dtype=c.dtype(),
                       memory_config=c.mc())


def _max_pool2d(c: Ctx):
    a = c.attrs
    return ttnn.max_pool2d(c.args[0], int(a["batch_size"]), int(a["input_height"]), int(a["input_width"]),
                           int(a["channels"]), _ints(a["kernel_size"]), _ints(a["stride"]), _ints(a["padding"]),
                           _ints(a["dilation"]), ceil_mode=bool(a.get("ceil_mode", False)), memory_config=c.mc(),
                           reallocate_halo_output=bool(a.get("reallocate_halo_output", True)),
                           dtype=_pool_dtype(c), output_layout=c.layout())


def _creation(fill):
    def run(c: Ctx):
        layout = c.out.get("layout") or {}
        value = fill(c)
        shape = _ints(c.attrs["shape"]) if "shape" in c.attrs else list(c.out["shape"])
        on_device = layout.get("buffer", "dram") != "system_memory"
        return ttnn.full(ttnn.Shape(shape), fill_value=value, dtype=c.dtype() or ttnn.float32, layout=c.layout(),
                         device=c.device if on_device else None, memory_config=c.mc() if on_device else None)
    return run


def _constant(c: Ctx):
    value = c.constants[c.op["constant"]]
    return conform(host_tensor(value, c.out), c.out, c.device)


def _to_layout(c: Ctx):
    return conform(c.args[0], c.out, c.device)


def _typecast(c: Ctx):
    if c.args[0].storage_type() == ttnn.StorageType.HOST:
        return ttnn.to_dtype(c.args[0], c.dtype())
    return ttnn.typecast(c.args[0], c.dtype(), memory_config=c.mc())


def _ints(value) -> list[int]:
    """An integer list attribute: a list, one integer, or a `#ttnn.shape<1x32x1>` body ("1x32x1")."""
    if isinstance(value, str):
        return [int(v) for v in value.split("x") if v]
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def _prod(c: Ctx):
    """ttnn.prod reduces one dimension (or all of them) per call."""
    dims = c.attrs.get("dim_arg")
    dims = list(dims) if isinstance(dims, list) else ([dims] if dims is not None else [])
    if len(dims) > 1:
        raise Unmapped(f"ttnn.prod over {len(dims)} dimensions is not mapped to ttnn yet")
    return ttnn.prod(c.args[0], dims[0] if dims else None, keepdim=bool(c.attrs.get("keep_dim", False)),
                     memory_config=c.mc())


def _scalar_of(value):
    return value if not isinstance(value, list) else value[0]


def _pool_common(c: Ctx) -> dict:
    """What tt-metal's 2-D pools share: the compiler's geometry, halo and output choices."""
    a = c.attrs
    return dict(batch_size=int(a["batch_size"]), input_h=int(a["input_height"]), input_w=int(a["input_width"]),
                channels=int(a["channels"]), kernel_size=_ints(a["kernel_size"]), stride=_ints(a["stride"]),
                padding=_ints(a["padding"]), ceil_mode=bool(a.get("ceil_mode", False)), memory_config=c.mc(),
                reallocate_halo_output=bool(a.get("reallocate_halo_output", True)),
                dtype=_pool_dtype(c), output_layout=c.layout(),
                config_tensor_in_dram=bool(a.get("config_tensors_in_dram", False)))


def _pool_dtype(c: Ctx):
    """The result's dtype where tt-metal's pools write it; else bf16, which tt-mlir's runtime gets by
    passing none (tt-metal's pools refuse f32 outputs), and the program's next layout change casts."""
    return c.dtype() if c.dtype() in (ttnn.bfloat16, ttnn.bfloat8_b, ttnn.bfloat4_b) else ttnn.bfloat16


def _avg_pool2d(c: Ctx):
    a = c.attrs
    divisor = int(a.get("divisor_override") or 0)  # 0: none (the window's size divides)
    return ttnn.avg_pool2d(c.args[0], **_pool_common(c), count_include_pad=bool(a.get("count_include_pad", True)),
                           divisor_override=divisor or None,
                           compute_kernel_config=c.compute_config())


def _max_pool2d_with_indices(c: Ctx):
    return ttnn.max_pool2d(c.args[0], **_pool_common(c), dilation=_ints(c.attrs["dilation"]), return_indices=True)


def _conv1d(c: Ctx):
    a = c.attrs
    padding = _ints(a["padding"])
    return ttnn.conv1d(input_tensor=c.args[0], weight_tensor=c.args[1], device=c.device,
                       in_channels=int(a["in_channels"]), out_channels=int(a["out_channels"]),
                       batch_size=int(a["batch_size"]), input_length=int(a["input_length"]),
                       kernel_size=int(a["kernel_size"]), stride=int(a.get("stride", 1)),
                       padding=padding if len(padding) > 1 else padding[0], dilation=int(a.get("dilation", 1)),
                       groups=int(a.get("groups", 1)), bias_tensor=c.args[2] if len(c.args) > 2 else None,
                       conv_config=conv2d_config(a), compute_config=c.compute_config(), dtype=c.dtype(),
                       memory_config=c.mc())


def _conv_transpose2d(c: Ctx):
    a = c.attrs
    return ttnn.conv_transpose2d(input_tensor=c.args[0], weight_tensor=c.args[1], device=c.device,
                                 in_channels=int(a["in_channels"]), out_channels=int(a["out_channels"]),
                                 batch_size=int(a["batch_size"]), input_height=int(a["input_height"]),
                                 input_width=int(a["input_width"]), kernel_size=_ints(a["kernel_size"]),
                                 stride=_ints(a["stride"]), padding=_ints(a["padding"]),
                                 output_padding=_ints(a.get("output_padding", [0, 0])),
                                 dilation=_ints(a["dilation"]), groups=int(a.get("groups", 1)),
                                 bias_tensor=c.args[2] if len(c.args) > 2 else None, conv_config=conv2d_config(a),
                                 compute_config=c.compute_config(), dtype=c.dtype(), memory_config=c.mc())


def _batch_norm_operands(c: Ctx) -> dict:
    """Input, running mean, running variance, weight, bias as the op's operand segments name them
    (an absent segment is None)."""
    sizes = [int(n) for n in (c.attrs.get("operandSegmentSizes") or [1] * len(c.args))]
    names = ("input", "running_mean", "running_var", "weight", "bias")
    taken, out = iter(c.args), {}
    for name, n in zip(names, sizes + [0] * (len(names) - len(sizes))):
        out[name] = next(taken) if n else None
    return out


def _batch_norm_inference(c: Ctx):
    x = _batch_norm_operands(c)
    return ttnn.batch_norm(x["input"], running_mean=x["running_mean"], running_var=x["running_var"], training=False,
                           eps=float(c.attrs.get("epsilon", 1e-5)), weight=x["weight"], bias=x["bias"],
                           memory_config=c.mc(), compute_kernel_config=c.compute_config())


def _batch_norm_training(c: Ctx):
    """tt-metal's batch_norm in training mode updates the running statistics in place, and tt-mlir's
    runtime returns them as the batch mean and variance. Where the program passes none, they start
    at zero (mean) and one (variance), tt-metal's own defaults."""
    x = _batch_norm_operands(c)
    stats_type = c.result_types[1]
    for name, fill in (("running_mean", 0.0), ("running_var", 1.0)):
        if x[name] is None:
            x[name] = ttnn.full(ttnn.Shape(list(stats_type["shape"])), fill_value=fill,
                                dtype=DTYPES[(stats_type.get("layout") or {}).get("dtype", "f32")],
                                layout=ttnn.TILE_LAYOUT, device=c.device, memory_config=memory_config(stats_type.get("layout")))
    out = ttnn.batch_norm(x["input"], running_mean=x["running_mean"], running_var=x["running_var"], training=True,
                          eps=float(c.attrs.get("epsilon", 1e-5)), momentum=float(c.attrs.get("momentum", 0.1)),
                          weight=x["weight"], bias=x["bias"], memory_config=c.mc(),
                          compute_kernel_config=c.compute_config())
    return [out, x["running_mean"], x["running_var"]]


# tt-metal's bitcast pairs (same width); others go through the unsigned type of that width
BITCAST_VIA = {4: ttnn.uint32, 2: ttnn.uint16}
ELEMENT_BYTES = {"f32": 4, "si32": 4, "u32": 4, "bf16": 2, "u16": 2}


def _bitcast_convert(c: Ctx):
    source = (c.op["operand_types"][0].get("layout") or {}).get("dtype")
    target = (c.out.get("layout") or {}).get("dtype")
    width = ELEMENT_BYTES.get(source)
    if width is None or ELEMENT_BYTES.get(target) != width:
        raise Unmapped(f"ttnn.bitcast_convert from {source} to {target}: ttnn.bitcast reinterprets 16- and 32-bit "
                       "types of the same width only")
    x, via = c.args[0], BITCAST_VIA[width]
    if x.dtype != via and c.dtype() != via:
        x = ttnn.bitcast(x, via, memory_config=c.mc())
    return ttnn.bitcast(x, c.dtype(), memory_config=c.mc()) if x.dtype != c.dtype() else x


def _slice_dynamic(c: Ctx):
    step = c.attrs.get("step")
    return ttnn.slice(c.args[0], c.args[1], c.args[2], _ints(step) if step else None, memory_config=c.mc())


def _rand(c: Ctx):
    a = c.attrs
    return ttnn.rand(ttnn.Shape(_ints(a["size"])), c.device, dtype=c.dtype() or ttnn.bfloat16, layout=c.layout(),
                     memory_config=c.mc() or ttnn.DRAM_MEMORY_CONFIG, low=float(a.get("low", 0.0)),
                     high=float(a.get("high", 1.0)), seed=int(a.get("seed", 0)))


class Rows:
    """tt-mlir's rows_gather / rows_scatter, as opbyop's model reads them (opbyop.device.kernels.indexing):
    the operand is (pre, *sizes, rest) (`rows_split`, computed by opbyop when it wrote the plan); the
    indices (batch, len(sizes), n) hold n window starts per row (batch 1: the same for every row); each
    window covers `windows` elements of the `sizes` dimensions. Both ops are tt-mlir's own device
    operations, which PyPI's ttnn does not ship, so the runner reads the indices back to the host (as
    tt-mlir's runtime reads a loop's condition), turns each window into element positions along the
    operand's `sizes` dimensions flattened to one, and tt-metal's own kernels move the data: ttnn.gather
    / ttnn.embedding, ttnn.scatter / scatter_add. Data movement is exact, so the values are those the
    plugin's kernels give; what StableHLO leaves to the op (a gather's start clamped into the operand,
    a scatter's window that does not fit skipped, the last of repeated replacements winning) is done
    on the host, exactly."""

    def __init__(self, c: Ctx):
        a = c.attrs
        self.sizes = _ints(a["sizes"])
        self.windows = _ints(a.get("windows") or [1] * len(self.sizes))
        split = c.op.get("rows_split")
        if split is None or len(self.windows) != len(self.sizes):
            raise Unmapped(f"{c.op['name']} of {c.op['operand_types'][0]['shape']} over sizes {self.sizes} "
                           f"windows {self.windows}: opbyop's model cannot read this form either")
        self.pre, self.rest = int(split[0]), int(split[1])
        self.span = int(np.prod(self.sizes))  # elements (of `rest` each) one row addresses

    def starts(self, c: Ctx) -> np.ndarray:
        """The window starts (pre, n, len(sizes)), read from the device."""
        indices = to_numpy(c.args[1], c.op["operand_types"][1]).astype(np.int64)
        batch = indices.shape[0] if indices.ndim == 3 else 1
        starts = indices.reshape(batch, len(self.sizes), -1).transpose(0, 2, 1)
        return np.broadcast_to(starts, (self.pre,) + starts.shape[1:])

    def inside(self, starts: np.ndarray) -> np.ndarray:
        """(pre, n): the window fits in the operand."""
        limit = np.array(self.sizes) - np.array(self.windows)
        return np.all((starts >= 0) & (starts <= limit), axis=-1)

    def positions(self, starts: np.ndarray) -> np.ndarray:
        """(pre, n, cells): each window's elements as positions along the flattened `sizes` dimensions,
        its start clamped into the operand (StableHLO's gather clamps it so)."""
        limit = np.maximum(np.array(self.sizes) - np.array(self.windows), 0)
        cells = np.stack(np.unravel_index(np.arange(int(np.prod(self.windows))), self.windows), axis=1)
        coords = np.clip(starts, 0, limit)[:, :, None, :] + cells[None, None]
        return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), self.sizes)

    def rows_of(self, x, layout):
        """The operand as (pre, span, rest) in `layout`."""
        return ttnn.reshape(ttnn.to_layout(x, layout), [self.pre, self.span, self.rest])

    def index(self, positions: np.ndarray, c: Ctx, layout, over_rest: bool):
        """Positions (pre, m) as a device index tensor: (pre, m), or (pre, m, rest) when the data moved
        is `rest` wide (ttnn's gather and scatter take an index of their output's or source's shape)."""
        if over_rest:
            positions = np.repeat(positions[:, :, None], self.rest, axis=2)
        host = ttnn.Tensor(np.ascontiguousarray(positions, dtype=np.uint32), ttnn.uint32)
        return ttnn.to_device(ttnn.to_layout(host, layout), c.device)


def _rows_gather(c: Ctx):
    """A window per index: ttnn.embedding where the whole row of a bf16 table is taken (one element
    position per index, `rest` wide), else ttnn.gather along the positions. With `fill_out_of_bounds`,
    a window that does not fit reads a zero row appended to the table."""
    rows = Rows(c)
    starts = rows.starts(c)
    positions = rows.positions(starts).reshape(rows.pre, -1)
    table = rows.rows_of(c.args[0], ttnn.TILE_LAYOUT)
    if c.attrs.get("fill_out_of_bounds"):
        outside = ~np.repeat(rows.inside(starts), positions.shape[1] // starts.shape[1], axis=1)
        if outside.any():
            positions = np.where(outside, rows.span, positions)
            table = ttnn.pad(table, [(0, 0), (0, 1), (0, 0)], 0.0)
    width = table.shape[1]
    if rows.pre == 1 and rows.rest > 1 and c.args[0].dtype == ttnn.bfloat16:
        weights = ttnn.reshape(ttnn.to_layout(table, ttnn.ROW_MAJOR_LAYOUT), [width, rows.rest])
        out = ttnn.embedding(rows.index(positions, c, ttnn.ROW_MAJOR_LAYOUT, False), weights, layout=c.layout(),
                             dtype=c.dtype(), memory_config=c.mc())
    elif rows.rest == 1:  # single elements: a gather along the last axis
        out = ttnn.gather(ttnn.reshape(table, [rows.pre, width]), -1, rows.index(positions, c, ttnn.TILE_LAYOUT, False),
                          memory_config=c.mc())
    else:
        out = ttnn.gather(table, 1, rows.index(positions, c, ttnn.TILE_LAYOUT, True), memory_config=c.mc())
    return conform(ttnn.reshape(out, list(c.out["shape"])), c.out, c.device)


# rows_scatter's combinations and the ttnn call that performs each (ttnn.scatter reduces by add or
# multiply only: its TT_FATAL says so for amax and amin)
SCATTERS = {"invalid": ("scatter", None), "none": ("scatter", None), "sum": ("scatter_add", None),
            "add": ("scatter_add", None), "prod": ("scatter", "multiply"), "mul": ("scatter", "multiply")}


def _rows_scatter(c: Ctx):
    """ttnn.scatter (replace), scatter_add (sum) or scatter with reduce="multiply" (prod) of each window's
    updates at its positions, in row-major layout (tt-metal's scatter refuses tiled f32). A window that
    does not fit, and a replacement a later one overwrites, are sent to a spare row cut off afterwards."""
    a = c.attrs
    reduce = str(a.get("reduce", "invalid")).rsplit("<", 1)[-1].rstrip(">").lower()
    if reduce not in SCATTERS:
        raise Unmapped(f"ttnn.rows_scatter with reduce {reduce} has no call in ttnn 0.81.1: ttnn.scatter reduces "
                       "by add or multiply only, and tt-mlir's own RowsScatterOperation is not in PyPI's ttnn")
    rows = Rows(c)
    starts = rows.starts(c)
    positions = rows.positions(starts)
    positions = np.where(rows.inside(starts)[:, :, None], positions, rows.span).reshape(rows.pre, -1)
    if SCATTERS[reduce] == ("scatter", None):
        positions = _last_wins(positions, rows.span)
    table = rows.rows_of(c.args[0], ttnn.ROW_MAJOR_LAYOUT)
    spare = bool((positions == rows.span).any())
    if spare:
        table = ttnn.pad(table, [(0, 0), (0, 1), (0, 0)], 0.0)
    updates = ttnn.reshape(ttnn.to_layout(c.args[2], ttnn.ROW_MAJOR_LAYOUT), [rows.pre, positions.shape[1], rows.rest])
    call, combine = SCATTERS[reduce]
    extra = {"reduce": combine} if combine else {}
    out = getattr(ttnn, call)(table, 1, rows.index(positions, c, ttnn.ROW_MAJOR_LAYOUT, True), updates, **extra)
    if spare:
        out = ttnn.slice(out, [0, 0, 0], [rows.pre, rows.span, rows.rest])
    return conform(ttnn.reshape(out, list(c.out["shape"])), c.out, c.device)


def _last_wins(positions: np.ndarray, spare: int) -> np.ndarray:
    """Each row's positions with every replacement that a later one overwrites sent to `spare`."""
    out = positions.copy()
    for row in out:
        _, last = np.unique(row[::-1], return_index=True)
        keep = np.zeros(row.shape, bool)
        keep[row.size - 1 - last] = True
        row[~keep] = spare
    return out


# ttnn 0.81.1's accumulation ops: the reductions of ttnn.cumulative it has a call for
ACCUMULATIONS = {"sum": "cumsum", "add": "cumsum", "prod": "cumprod", "mul": "cumprod"}


def _cumulative(c: Ctx):
    """ttnn.cumulative (the compiler's scan of a reduction along a dimension) as ttnn 0.81.1's
    accumulation op of that reduction; a reduction it has none for (logsumexp, max, min) is unmapped."""
    kind = str(c.attrs.get("reduction", "sum")).split("<")[-1].rstrip(">").strip()
    if kind not in ACCUMULATIONS:
        raise Unmapped(f"ttnn.cumulative with reduction {kind} has no call in ttnn 0.81.1: its accumulation ops "
                       "are cumsum and cumprod")
    return getattr(ttnn, ACCUMULATIONS[kind])(c.args[0], int(c.attrs["dim"]),
                                              reverse_order=bool(c.attrs.get("reverse", False)))


def _clamp_scalar(c: Ctx):
    """Integer bounds stay integers on an integer tensor (float bounds make tt-metal's clamp a float op)."""
    bound = int if c.args[0].dtype in (ttnn.int32, ttnn.uint32, ttnn.uint16, ttnn.uint8) else float
    return ttnn.clamp(c.args[0], min=bound(c.attrs["min"]), max=bound(c.attrs["max"]), memory_config=c.mc())


def _no_ttnn_call(kind: str, why: str):
    """An op kind this tt-mlir emits that ttnn 0.81.1 has no call for: not_simulated, saying why."""
    def run(c: Ctx):
        raise Unmapped(f"{kind} has no call in ttnn 0.81.1: {why}")
    return run


HANDLERS = {
    "ttnn.to_layout": _to_layout, "ttnn.to_device": _to_layout, "ttnn.from_device": _to_layout,
    "ttnn.to_memory_config": _to_layout, "ttnn.typecast": _typecast,
    "ttnn.to_dtype": _typecast,
    "ttnn.reshape": lambda c: ttnn.reshape(c.args[0], _ints(c.attrs["shape"]), memory_config=c.mc()),
    "ttnn.permute": lambda c: ttnn.permute(c.args[0], _ints(c.attrs["permutation"]), memory_config=c.mc()),
    "ttnn.transpose": lambda c: ttnn.transpose(c.args[0], int(c.attrs["dim0"]), int(c.attrs["dim1"])),
    "ttnn.matmul": _matmul, "ttnn.linear": _matmul,
    "ttnn.conv2d": _conv2d, "ttnn.max_pool2d": _max_pool2d,
    "ttnn.full": _creation(lambda c: _scalar_of(c.attrs["fill_value"])),
    "ttnn.ones": _creation(lambda c: 1.0), "ttnn.zeros": _creation(lambda c: 0.0),
    "ttnn.empty": _creation(lambda c: 0.0),
    "ttnn.constant": _constant,
    "ttnn.arange": lambda c: ttnn.arange(int(c.attrs.get("start", 0)), int(c.attrs["end"]), int(c.attrs.get("step", 1)),
                                         dtype=c.dtype() or ttnn.bfloat16, device=c.device, layout=c.layout(),
                                         memory_config=c.mc()),
    "ttnn.concat": lambda c: ttnn.concat(c.args, int(c.attrs["dim"]), memory_config=c.mc()),
    "ttnn.slice_static": lambda c: ttnn.slice(c.args[0], _ints(c.attrs["begins"]), _ints(c.attrs["ends"]),
                                              _ints(c.attrs["step"]), memory_config=c.mc()),
    "ttnn.repeat": lambda c: ttnn.repeat(c.args[0], _ints(c.attrs["repeat_dims"])),
    "ttnn.where": lambda c: ttnn.where(c.args[0], c.args[1], c.args[2], memory_config=c.mc()),
    "ttnn.softmax": lambda c: ttnn.softmax(c.args[0], dim=int(c.attrs["dimension"]), memory_config=c.mc(),
                                           compute_kernel_config=c.compute_config(),
                                           numeric_stable=bool(c.attrs.get("numericStable", False))),
    "ttnn.clamp_scalar": lambda c: _clamp_scalar(c),
    "ttnn.clamp_tensor": lambda c: ttnn.clamp(c.args[0], min=c.args[1], max=c.args[2], memory_config=c.mc()),
    "ttnn.embedding": lambda c: ttnn.embedding(c.args[0], c.args[1], dtype=c.dtype(), memory_config=c.mc()),
    "ttnn.rms_norm": lambda c: ttnn.rms_norm(c.args[0], epsilon=float(c.attrs.get("epsilon", 1e-12)),
                                             weight=c.args[1] if len(c.args) > 1 else None,
                                             bias=c.args[2] if len(c.args) > 2 else None, memory_config=c.mc(),
                                             compute_kernel_config=c.compute_config()),
    "ttnn.layer_norm": lambda c: ttnn.layer_norm(c.args[0], epsilon=float(c.attrs.get("epsilon", 1e-12)),
                                                 weight=c.args[1] if len(c.args) > 1 else None,
                                                 bias=c.args[2] if len(c.args) > 2 else None, memory_config=c.mc(),
                                                 compute_kernel_config=c.compute_config()),
    "ttnn.leaky_relu": lambda c: ttnn.leaky_relu(c.args[0], float(c.attrs["parameter"]), memory_config=c.mc()),
    "ttnn.atan2": lambda c: ttnn.atan2(c.args[0], c.args[1], memory_config=c.mc()),
    "ttnn.prod": lambda c: _prod(c),
    "ttnn.pow_scalar": lambda c: ttnn.pow(c.args[0], float(_scalar_of(c.attrs["rhs"])), memory_config=c.mc()),
    "ttnn.cumsum": lambda c: ttnn.cumsum(c.args[0], int(c.attrs["dim"])),
    "ttnn.moreh_cumsum": lambda c: ttnn.cumsum(c.args[0], int(c.attrs["dim"])),
    "ttnn.cumprod": lambda c: ttnn.cumprod(c.args[0], int(c.attrs["dim"])),
    "ttnn.cumulative": lambda c: _cumulative(c),
    "ttnn.argmax": lambda c: ttnn.argmax(c.args[0], dim=c.attrs.get("dim"), keepdim=bool(c.attrs.get("keep_dim"))),
    "ttnn.pad": lambda c: ttnn.pad(c.args[0], [tuple(_ints(c.attrs["padding"])[i:i + 2])
                                               for i in range(0, len(_ints(c.attrs["padding"])), 2)],
                                   float(c.attrs.get("value", 0.0))),
    "ttnn.round": lambda c: ttnn.round(c.args[0], decimals=int(c.attrs.get("decimals", 0)), memory_config=c.mc()),
    "ttnn.sort": lambda c: ttnn.sort(c.args[0], int(c.attrs.get("dim", -1)), bool(c.attrs.get("descending", False)),
                                     bool(c.attrs.get("stable", False)), memory_config=c.mc()),
    "ttnn.bitcast_convert": _bitcast_convert,
    "ttnn.slice_dynamic": _slice_dynamic,
    "ttnn.assign": lambda c: ttnn.assign(c.args[0], memory_config=c.mc() or c.args[0].memory_config(),
                                         dtype=c.dtype()),
    "ttnn.avg_pool2d": _avg_pool2d, "ttnn.max_pool2d_with_indices": _max_pool2d_with_indices,
    "ttnn.conv1d": _conv1d, "ttnn.conv_transpose2d": _conv_transpose2d,
    "ttnn.batch_norm_inference": _batch_norm_inference, "ttnn.batch_norm_training": _batch_norm_training,
    "ttnn.rand": _rand,
    "ttnn.rows_gather": _rows_gather,
    "ttnn.rows_scatter": _rows_scatter,
    "ttnn.reduce_precision": _no_ttnn_call("ttnn.reduce_precision", "no ttnn operation rounds a float to fewer "
                                           "exponent and mantissa bits"),
    "ttnn.rng_bit_generator": _no_ttnn_call("ttnn.rng_bit_generator", "its random bits come from a tt-metal "
                                            "operation (experimental rng_bits) that PyPI's ttnn does not ship"),
}
for _name in ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "relu6",
              "gelu", "reciprocal", "floor", "ceil", "sign", "logical_not", "erf", "log1p", "expm1", "isfinite",
              "silu", "bitwise_not", "cbrt", "atan", "asin", "acos", "erfc", "hardsigmoid", "mish", "square"):
    HANDLERS[f"ttnn.{_name}"] = _unary(_name)
for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "eq", "ne", "gt", "ge", "lt", "le",
              "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
              "remainder", "pow", "logical_left_shift", "logical_right_shift", "bitwise_left_shift",
              "bitwise_right_shift"):
    HANDLERS[f"ttnn.{_name}"] = _binary(_name)
for _name in ("sum", "mean", "max", "min"):
    HANDLERS[f"ttnn.{_name}"] = _reduction(_name)
HANDLERS["ttnn.pow_tensor"] = _binary("pow")


# --- what tt-metal allocates ----------------------------------------------------------------------

class Footprint:
    """What tt-metal itself allocates for a program, as its allocator and graph capture report it:
    L1 per core (resident tensors plus the running op's own buffers), circular buffers per core
    (the op's CBs and Metal 2.0 dataflow buffers), and DRAM bytes, each at its peak over the program.

    An op's own buffers are read from a capture in NO_DISPATCH mode (tt-metal builds the op's program
    without running it): in NORMAL mode the capture misses dataflow buffers (a matmul or softmax
    reports 0). Resident tensors come from the allocator's statistics, bank by bank."""

    def __init__(self, device):
        self.device = device
        self.paused = False  # inside ttnn's report capture: a nested capture would show there as an op
        self.reset()

    def reset(self) -> None:
        self.l1, self.cb, self.dram = 0, 0, 0
        self.measured = True  # every op's own buffers were read (else the figures are floors)

    def resident(self) -> tuple[int, int]:
        """(L1 bytes allocated in the fullest bank, i.e. per core; DRAM bytes allocated in all banks)."""
        l1 = ttnn._ttnn.device.GetMemoryView(self.device, ttnn.BufferType.L1)
        dram = ttnn._ttnn.device.GetMemoryView(self.device, ttnn.BufferType.DRAM)
        return l1.total_bytes_allocated_per_bank, dram.total_bytes_allocated_per_bank * dram.num_banks

    def before(self, call) -> None:
        """The op's own buffers, from a capture of `call` that tt-metal does not dispatch."""
        l1, dram = self.resident()
        graph = ttnn._ttnn.graph
        graph.begin_graph_capture(graph.RunMode.NO_DISPATCH)
        try:
            call()
        except Exception as e:  # the real run says why; this op's own buffers stay unread
            print(f"{NOTE}footprint not read: {words(e)}", file=sys.stderr, flush=True)
            self.measured = False
            return
        finally:
            trace = graph.end_graph_capture()
        usage = graph.extract_resource_usage_per_core(trace)
        op_dram = sum(int(n["params"].get("size", 0)) for n in trace
                      if n["node_type"] == "buffer_allocate" and n["params"].get("type") == "DRAM")
        self.cb = max(self.cb, usage.peak_cb + usage.peak_dataflow_buffer)
        self.l1 = max(self.l1, l1 + usage.peak_total)
        self.dram = max(self.dram, dram + op_dram)

    def after(self) -> None:
        l1, dram = self.resident()
        self.l1, self.dram = max(self.l1, l1), max(self.dram, dram)

    def reply(self) -> dict:
        return {"peak_l1_bytes": self.l1, "peak_cb_bytes": self.cb, "peak_dram_bytes": self.dram,
                "memory_measured": self.measured}


# --- running a program ---------------------------------------------------------------------------

class Interpreter:
    def __init__(self, device):
        self.device = device
        self.const_cache: dict[str, list] = {}
        self.current = ""  # the op running now: a failure names it
        self.footprint = Footprint(device)
        # seconds per phase of a program's run (the reply's "phases"): "inputs", "ops" (and "op KIND" per
        # TTNN op kind), "footprint" (the allocator's and graph capture's reads), "outputs" (which waits
        # for the last op to finish: tt-metal returns from an op before ttsim has run it to the end)
        self.phases: dict[str, float] = {}
        # the output of each op the plan marks, under its key (`main.12`, `main_const_eval_0.1`), in the
        # order of each one's last run: a loop body's op ran again replaces its value
        self.observed: dict[str, np.ndarray] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

    def call(self, plan: dict, name: str, args: list, constants: dict, borrowed: bool = False) -> list:
        """Run function `name` of the plan on `args`. A `borrowed` call (a loop's body or condition, a
        case's branch) never frees its arguments: its caller still holds them."""
        fn = plan["functions"][name]
        values: dict[int, object] = dict(zip(fn["arguments"], args))
        for op in fn["ops"]:
            kind = self.current = op["name"]
            operands = [values.get(v) for v in op["operands"]]
            if kind == "ttnn.get_device":
                values[op["results"][0]] = self.device
                continue
            if kind == "ttnn.deallocate":
                for v in op["operands"]:
                    tensor = values.pop(v, None)
                    # a conversion that had nothing to do returns its input: free it only when no
                    # other value is the same tensor (identity: ttnn's == is an elementwise op)
                    if tensor is not None and not any(other is tensor for other in values.values()) and \
                            not self.held_elsewhere(tensor, args if borrowed else ()):
                        ttnn.deallocate(tensor, force=bool((op.get("attrs") or {}).get("force", False)))
                continue
            if kind == "ttcore.load_cached":
                callee = op["attrs"]["callee"].lstrip("@")
                if callee not in self.const_cache:  # once per program run, as tt-mlir's runtime caches it
                    self.const_cache[callee] = self.call(plan, callee, operands, constants)
                results = self.const_cache[callee]
            elif kind == "ttcore.while_loop":
                results = self.while_loop(plan, op, [x for x in operands if x is not None], constants)
            elif kind == "ttcore.case":
                results = self.case(plan, op, operands, constants)
            else:
                handler = HANDLERS.get(kind)
                if handler is None:
                    raise Unmapped(f"{kind} has no ttnn call in opbyop's ttsim runner")
                tensors = [x for x, t in zip(operands, op["operand_types"]) if t is not None]
                # named in the log first: ttsim may end the process inside the op, with no reply
                print(f"{RUNNING}{kind}", file=sys.stderr, flush=True)
                ctx = Ctx(op, tensors, self.device, constants)
                if not self.footprint.paused:
                    with self.phase("footprint"):
                        self.footprint.before(lambda: handler(ctx))
                with self.phase("ops"), self.phase(f"op {kind}"):
                    out = handler(ctx)
                with self.phase("footprint"):
                    self.footprint.after()
                results = list(out) if isinstance(out, (list, tuple)) else [out]
                if "observe" in op:
                    self.observe(op, results[0])
            for v, r in zip(op["results"], results):
                values[v] = r
        return [values[v] for v in fn["returns"]]


    def observe(self, op: dict, tensor) -> None:
        """Keep the op's output for the caller's accuracy trace (the last one, moved to the end, when
        the op runs again, as the model's observer keeps the latest). One that cannot be read back
        costs the trace its point, never the run its verdict (the trace skips ops it has no value for)."""
        with self.phase("observe"):
            try:
                value = to_numpy(tensor, op["result_types"][0])
                self.observed.pop(op["observe"], None)
                self.observed[op["observe"]] = value
            except Exception as e:  # any failure of ttnn to read it back: the point is dropped
                print(f"not observed: {op['name']}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def held_elsewhere(self, tensor, args) -> bool:
        """A function's argument in a borrowed call, or a const-eval result (a loop body frees its
        cached constants every iteration, and the next iteration reads them again)."""
        return any(tensor is a for a in args) or \
            any(tensor is r for results in self.const_cache.values() for r in results)

    def host_scalar(self, x, ttype: dict) -> float:
        """A one-element device tensor's value on the host, as tt-mlir's runtime reads a loop's
        condition or a case's index."""
        return float(to_numpy(x, ttype).reshape(-1)[0])

    def while_loop(self, plan: dict, op: dict, operands: list, constants: dict) -> list:
        """StableHLO while as tt-mlir emits it: the first `state_count` operands are the loop's state,
        the rest values every iteration reads unchanged; the body runs while the condition program
        says true (read back to the host each time), or a counted number of times
        (`initial`, `limit`, `step` bounds)."""
        a = op.get("attrs") or {}
        count = int(a.get("state_count") or len(operands))
        state, invariant = operands[:count], operands[count:]
        bound = loop_bound(a)
        body = str(a["body_program"]).lstrip("@")
        condition = None if bound is not None else str(a["condition_program"]).lstrip("@")
        for iteration in range(MAX_LOOP_ITERATIONS):
            if bound is not None:
                go = iteration < bound
            else:
                cond_fn = plan["functions"][condition]
                (flag,) = self.call(plan, condition, state + invariant, constants, borrowed=True)
                go = self.host_scalar(flag, cond_fn["return_types"][0]) != 0
            if not go:
                break
            state = self.call(plan, body, state + invariant, constants, borrowed=True)
        else:
            raise Unmapped(f"ttcore.while_loop did not finish in {MAX_LOOP_ITERATIONS:,} iterations")
        indices = a.get("output_indices") or list(range(len(op["results"])))
        # a state entry the loop passed through unchanged is the caller's tensor: the result is a copy,
        # so that freeing either one leaves the other
        return [self.own(state[int(i)], operands) for i in indices]

    def case(self, plan: dict, op: dict, operands: list, constants: dict) -> list:
        """StableHLO case: the branch the index (read back to the host) names; an index out of range
        takes the last branch."""
        branches = (op.get("attrs") or {})["branch_programs"]
        branches = branches if isinstance(branches, list) else [branches]
        index = int(self.host_scalar(operands[0], op["operand_types"][0]))
        chosen = str(branches[index if 0 <= index < len(branches) else -1]).lstrip("@")
        args = [x for x in operands[1:] if x is not None]
        return [self.own(x, args) for x in self.call(plan, chosen, args, constants, borrowed=True)]

    @staticmethod
    def own(x, inputs: list):
        return ttnn.clone(x) if any(x is i for i in inputs) else x


# a loop whose condition never turns false is opbyop's to stop: the op timeout would cost the runner
MAX_LOOP_ITERATIONS = 100_000


def loop_bound(attrs: dict) -> int | None:
    """How many times a counted ttcore.while_loop runs its body, or None for one with a condition program."""
    if "condition_program" in attrs:
        return None
    bounds = [attrs.get(k, d) for k, d in (("initial", 0), ("limit", None), ("step", 1))]
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) or bounds[2] == 0:
        raise Unmapped(f"ttcore.while_loop with loop bounds {bounds}: only constant, nonzero-step bounds are mapped")
    initial, limit, step = bounds
    return max(0, -(-(limit - initial) // step))


# L1 reserved at device open for the small buffers of halo ops (conv2d, pools), as tt-mlir's runtime
# opens its devices; 0 (ttnn's default) makes every max_pool2d fail to allocate its config tensors
L1_SMALL_SIZE = 1 << 15
NOTE = "opbyop-ttsim "  # the runner's own log lines begin so (the backend never takes them for tt-metal's)
RUNNING = NOTE + "running "  # the log line naming the op about to run
# the kernel JIT's compiler driver could not start one of its tools (seen under load): the host's fault
HOST_HICCUPS = ("fatal error: cannot execute", "could not run lto-wrapper")


def words(e: BaseException) -> str:
    """tt-metal's message, its `info:` lines included, without its C++ backtrace (the frames name only
    tt-metal's own library)."""
    text = str(e).strip() or type(e).__name__
    return " ".join(line.strip() for line in text.split("backtrace:")[0].splitlines() if line.strip())


def classify(e: BaseException) -> str:
    text = str(e)
    if isinstance(e, Unmapped):
        return "unmapped"
    if any(k in text for k in ("TT_FATAL", "TT_THROW", "Out of Memory", "Failed to generate binaries",
                               "failed to compile", "Statically allocated circular buffers")):
        return "rejected"
    return "mapping"


def run_program(interpreter: Interpreter, plan: dict, arrays: dict, folder: Path) -> dict:
    """One program on the device: its outputs written to `folder`, and the reply to send."""
    started = time.perf_counter()
    stage = "writing the inputs"
    interpreter.footprint.reset()
    interpreter.phases, interpreter.observed = {}, {}
    try:
        main = plan["functions"][plan["entry"]]
        with interpreter.phase("inputs"):
            args = [conform(host_tensor(arrays[f"in{i}"], t), t, interpreter.device)
                    for i, t in enumerate(main["argument_types"])]
            interpreter.footprint.after()
        stage, interpreter.current = "running", ""
        outputs = interpreter.call(plan, plan["entry"], args, arrays)
        stage = "reading the outputs"
        with interpreter.phase("outputs"):
            host = {f"out{i}": to_numpy(x, t) for i, (x, t) in enumerate(zip(outputs, main["return_types"]))}
            np.savez(folder / "outputs.npz", **host)
            if interpreter.observed:  # savez keeps the order: the trace replays the run's
                np.savez(folder / "observed.npz", **interpreter.observed)
        return {"ok": True, "seconds": time.perf_counter() - started, "ops": len(main["ops"]),
                "phases": interpreter.phases, **interpreter.footprint.reply()}
    except Exception as e:
        traceback.print_exc()  # into the runner's log: a mapping error is opbyop's bug to chase
        kind = classify(e)
        return {"ok": False, "kind": kind, "op": interpreter.current if stage == "running" else stage,
                "message": words(e) if kind != "mapping" else
                "".join(traceback.format_exception_only(type(e), e)).strip()}
    finally:
        interpreter.const_cache.clear()  # const-eval results belong to one program's run


REPORT_FOLDER = "ttnn-report"  # ttnn's own TT-NN Visualizer report of a run, in the request's folder


def ttnn_report(interpreter: Interpreter, plan: dict, arrays: dict, folder: Path) -> dict:
    """The program run once more under tt-metal's graph capture, imported by ttnn's own importer as its
    TT-NN Visualizer report (folder/ttnn-report: db.sqlite, cluster_descriptor.yaml). A second run, not
    the first: the footprint's NO_DISPATCH captures, nested in this one, would show there as operations.
    The C++ capture, not ttnn.graph's wrapper: its Python recording imports torch, which ttnn does not pull."""
    graph, trace = ttnn._ttnn.graph, folder / "ttnn-graph.json"
    started = time.perf_counter()
    interpreter.footprint.paused = True
    graph.begin_graph_capture(graph.RunMode.NORMAL)
    try:
        again = run_program(interpreter, plan, arrays, folder)
    finally:
        graph.end_graph_capture_to_file(str(trace))
        interpreter.footprint.paused = False
    if not again["ok"]:
        return {"report_error": f"the run under ttnn's graph capture failed: {again['message']}"}
    try:
        import_report(trace, folder / REPORT_FOLDER)
    except Exception as e:  # ttnn's importer: the run's verdict stands without its report
        traceback.print_exc()
        return {"report_error": f"ttnn's graph_report.import_report failed: {words(e)}"}
    return {"report": REPORT_FOLDER, "report_seconds": time.perf_counter() - started}


def hiccup(reply: dict) -> bool:
    return not reply["ok"] and any(h in reply["message"] for h in HOST_HICCUPS)


def serve(device) -> None:
    interpreter = Interpreter(device)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("close"):
            break
        folder = Path(request["dir"])
        plan = json.loads((folder / "plan.json").read_text())
        with np.load(folder / "inputs.npz") as data:
            arrays = {k: data[k] for k in data.files}
        reply = run_program(interpreter, plan, arrays, folder)
        for pause in (1, 5):  # the host could not start the RISC-V compiler: the kernel itself is
            if not hiccup(reply):  # fine, so the op is tried again before its failure is reported
                break
            time.sleep(pause)
            reply = run_program(interpreter, plan, arrays, folder)
        if hiccup(reply):
            reply["kind"] = "host"
        if reply["ok"] and request.get("report"):
            reply.update(ttnn_report(interpreter, plan, arrays, folder))
        _PROTOCOL.write(json.dumps(reply) + "\n")


def open_mesh(shape: str):
    """A mesh of ttsim's chips (a multichip build), with tt-metal's fabric: collectives move data
    over it (without it they fail: "Trying to get un-initialized fabric context")."""
    rows, cols = (int(n) for n in shape.split("x"))
    ttnn.set_fabric_config(ttnn.FabricConfig.FABRIC_1D)
    print(f"{RUNNING}opening a {rows}x{cols} mesh with tt-metal's fabric", file=sys.stderr, flush=True)
    return ttnn.open_mesh_device(ttnn.MeshShape(rows, cols), l1_small_size=L1_SMALL_SIZE)


def serve_mesh() -> None:
    """A mesh opened: its programs (sharded tensors, collectives) are not mapped to ttnn yet."""
    for line in sys.stdin:
        if json.loads(line).get("close"):
            break
        _PROTOCOL.write(json.dumps({"ok": False, "kind": "unmapped", "op": "", "message": (
            "mesh programs (sharded tensors, collectives) have no ttnn calls in opbyop's ttsim runner yet")}) + "\n")


def main(mesh: str) -> None:
    device = open_mesh(mesh) if mesh else ttnn.open_device(device_id=0, l1_small_size=L1_SMALL_SIZE)
    grid = device.compute_with_storage_grid_size()
    _PROTOCOL.write(json.dumps({"ready": True, "grid": list(grid) if hasattr(grid, "__iter__") else
                                [grid.x, grid.y]}) + "\n")
    try:
        serve_mesh() if mesh else serve(device)
    finally:
        ttnn.close_mesh_device(device) if mesh else ttnn.close_device(device)


if __name__ == "__main__":
    main(sys.argv[2] if len(sys.argv) > 2 else "")
