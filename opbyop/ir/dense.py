"""Dense elements attributes (`dense<...> : tensor<...>`) -> numpy arrays, for every element type.

jaxlib's Python bindings cannot read every dense attribute: bf16 has no buffer protocol, and a
complex one cannot even be handed to Python ("Can't cast unknown element type"). Their printed
form always can be read, so this module reads that: the hex blob MLIR prints for large constants
(raw little-endian element bytes; i1 one byte per element, or packed bits), nested lists of
numbers (floats may be written as their bit pattern in hex: 0x7FC00000 is NaN), `true`/`false`,
complex `(re,im)` pairs, and splats.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from opbyop.dtypes import numpy_dtype

_TYPE = re.compile(r":\s*tensor<([^>]*(?:<[^>]*>)?)>\s*$")
_TOKEN = re.compile(r"\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)|true|false|[-+]?0x[0-9A-Fa-f]+|"
                    r"[-+]?(?:inf|nan)|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_EXTRA_DTYPES = {"f8E4M3FN": ml_dtypes.float8_e4m3fn, "f8E5M2": ml_dtypes.float8_e5m2, "i4": ml_dtypes.int4,
                 "ui4": ml_dtypes.uint4, "si8": np.int8, "si16": np.int16, "si32": np.int32, "si64": np.int64}


class DenseError(ValueError):
    pass


def element_dtype(element_type: str) -> np.dtype:
    if element_type in _EXTRA_DTYPES:
        return np.dtype(_EXTRA_DTYPES[element_type])
    try:
        return numpy_dtype(element_type)
    except ValueError:
        raise DenseError(f"no numpy type for element type {element_type}") from None


def split_tensor_type(type_text: str) -> tuple[tuple[int, ...], str]:
    """'20x20xbf16' -> ((20, 20), 'bf16'); 'complex<f32>' -> ((), 'complex<f32>')."""
    parts = type_text.split("x")
    dims: list[int] = []
    while parts and parts[0].isdigit():
        dims.append(int(parts.pop(0)))
    return tuple(dims), "x".join(parts)


def parse_dense(text: str) -> np.ndarray:
    """`dense<...> : tensor<...>` (an attribute as MLIR prints it) -> its values, shaped."""
    text = text.strip()
    m = _TYPE.search(text)
    if not text.startswith("dense<") or m is None:
        raise DenseError(f"not a dense tensor attribute: {text[:80]}")
    shape, element = split_tensor_type(m.group(1))
    body = text[len("dense<"):m.start()].rstrip()
    if not body.endswith(">"):
        raise DenseError(f"malformed dense attribute: {text[:80]}")
    return dense_values(body[:-1].strip(), shape, element)


def dense_values(body: str, shape: tuple[int, ...], element: str) -> np.ndarray:
    """The body of `dense<BODY>` for a tensor of `shape` and `element` type."""
    dtype = element_dtype(element)
    count = int(np.prod(shape)) if shape else 1
    if body.startswith('"0x') or body.startswith("'0x"):
        return _from_hex(body.strip("\"'")[2:], dtype, shape, count)
    if body == "":  # dense<> of an empty tensor
        return np.zeros(shape, dtype=dtype)
    values = [_value(t, dtype) for t in _TOKEN.finditer(body)]
    if len(values) == 1 and count != 1:
        return np.full(shape, values[0], dtype=dtype)  # a splat
    if len(values) != count:
        raise DenseError(f"dense attribute holds {len(values)} values for a tensor of {count}")
    return np.array(values, dtype=dtype).reshape(shape)


def _from_hex(digits: str, dtype: np.dtype, shape: tuple[int, ...], count: int) -> np.ndarray:
    data = bytes.fromhex(digits)
    if dtype == np.bool_ and len(data) == (count + 7) // 8 and len(data) != count:  # packed bits
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:count]
        return bits.astype(np.bool_).reshape(shape)
    values = np.frombuffer(data, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype)
    if values.size == 1 and count != 1:
        return np.full(shape, values[0], dtype=dtype)  # a hex splat
    if values.size != count:
        raise DenseError(f"hex dense attribute holds {values.size} {dtype} values for a tensor of {count}")
    return values.astype(dtype).reshape(shape)


def _value(match: re.Match, dtype: np.dtype) -> object:
    if match.group(1) is not None:  # (re, im)
        real_dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        return complex(_number(match.group(1), real_dtype), _number(match.group(2), real_dtype))
    return _number(match.group(0), dtype)


def _number(token: str, dtype: np.dtype) -> object:
    token = token.strip()
    if token in ("true", "false"):
        return token == "true"
    if dtype.kind in "fV" or dtype.name in ("bfloat16",) or dtype.name.startswith("float8"):
        if token.lstrip("+-").startswith("0x"):  # a float written as its bit pattern
            bits = int(token, 16)
            return np.array(bits, dtype=f"u{dtype.itemsize}").view(dtype).item()
        return float(token)
    if dtype == np.bool_:
        return bool(int(token, 0))
    return int(token, 0) if token.lstrip("+-").startswith("0x") else int(float(token)) if "." in token else int(token)
