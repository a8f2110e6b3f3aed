"""Property-based fuzzing (hypothesis) of what reads untrusted input: the input-spec parser, the
MLIR loader and the device image loader. Each either returns a value or raises its own error
(OpbyopError): never another exception, never a dead process. Example counts stay modest (the
suite runs on 2 cores); no deadline, so a loaded machine does not fail them."""

from __future__ import annotations

import io
import warnings
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opbyop.errors import ImageError, ModuleError, OpbyopError

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


# -- input specs ------------------------------------------------------------------------------------
SPEC_DTYPES = ["f32", "f64", "f16", "bf16", "i64", "i32", "i1"]


@FUZZ
@given(st.lists(st.sampled_from(list("0123456789x:fib-6 \n٣") + ["f32", "i64", "bf16", "99999999999"]),
                max_size=20).map("".join) | st.text(max_size=30))
def test_input_specs_parse_or_raise_opbyop_errors(text):
    from opbyop.cli.app import MAX_SPEC_ELEMENTS, parse_input_spec

    try:
        spec = parse_input_spec(text)
    except OpbyopError as e:
        assert e.fix, "every refusal says how to write a spec"
        return
    assert all(d >= 0 for d in spec.shape) and spec.high >= 1
    count = 1
    for d in spec.shape:
        count *= d
    assert count <= MAX_SPEC_ELEMENTS


@FUZZ
@given(st.lists(st.integers(0, 4096), max_size=5), st.sampled_from(SPEC_DTYPES), st.none() | st.integers(1, 10**9))
def test_well_formed_input_specs_round_trip(shape, dtype, high):
    from opbyop.cli.app import SPEC_DTYPES as NAMES, parse_input_spec

    high = high if dtype.startswith("i") and dtype != "i1" else None
    text = "".join(f"{d}x" for d in shape) + dtype + (f":{high}" if high is not None else "")
    try:
        spec = parse_input_spec(text)
    except OpbyopError:
        assert any(d for d in shape) and _product(shape) > (1 << 30)  # only the size limit may refuse it
        return
    assert spec.shape == shape and spec.dtype == NAMES[dtype] and spec.high == (high or 2)


def _product(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


# -- the MLIR loader ------------------------------------------------------------------------------------
TOKENS = ["module", "{", "}", "(", ")", "<", ">", "[", "]", "->", ":", ",", "=", "%0", "%arg0", "@main", "func.func",
          "tensor", "tuple", "f32", "i64", "4x", "stablehlo.add", "stablehlo.constant", "dense", "return",
          '"', '"\\"', "//", "\n", " ", "loc(", "#loc", "^bb0", "!", "0x", "1.0"]
VALID = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
         "  %0 = stablehlo.add %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=80).map(" ".join) | st.text(max_size=200))
def test_mlir_text_parses_or_raises_a_module_error(text):
    from opbyop.ir.context import make_context
    from opbyop.ir.parse import parse_module

    try:
        parse_module(text, make_context(), "fuzz")
    except ModuleError as e:
        assert "fuzz" in e.problem


@FUZZ
@given(st.integers(0, len(VALID)), st.text(alphabet="<>{}()[]\"- \n", max_size=40))
def test_mutated_modules_parse_or_raise_a_module_error(at, insert):
    from opbyop.ir.context import make_context
    from opbyop.ir.parse import parse_module

    try:
        parse_module(VALID[:at] + insert + VALID[at:], make_context(), "fuzz")
    except ModuleError:
        pass


@FUZZ
@given(st.recursive(st.sampled_from(["f32", "x", "->", '"<<<"', "// ((((\n"]),
                    lambda inner: st.tuples(st.sampled_from(["()", "<>", "[]", "{}"]), st.lists(inner, max_size=3))
                    .map(lambda t: t[0][0] + " ".join(t[1]) + t[0][1]), max_leaves=40))
def test_nesting_depth_matches_a_plain_count(text):
    """The vectorised lexical check agrees with the obvious loop (strings and comments skipped)."""
    from opbyop.ir.parse import nesting_depth

    assert nesting_depth(text)[0] == _plain_depth(text)


def _plain_depth(text: str) -> int:
    depth = deepest = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            end = text.find('"', i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if c in "(<[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}" or (c == ">" and not (i and text[i - 1] == "-")):
            depth -= 1
        i += 1
    return deepest


def test_nesting_past_the_limit_is_refused_at_any_depth_beyond_it():
    from opbyop.ir.parse import MAX_NESTING, check_nesting

    check_nesting("module {\n" * MAX_NESTING + "}\n" * MAX_NESTING)  # at the limit: accepted
    with pytest.raises(ModuleError, match="levels deep"):
        check_nesting("tuple<" * (MAX_NESTING + 1))


# -- the device image loader ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def image_bytes(tmp_path_factory) -> bytes:
    import numpy as np

    from test_hostile_images import npz, write_image

    path = write_image(tmp_path_factory.mktemp("fuzz") / "image.zip",
                       constants=npz({"arg1": np.arange(12, dtype=np.float32).reshape(3, 4)}))
    return path.read_bytes()


@FUZZ
@given(data=st.data())
def test_mutated_images_load_or_raise_an_image_error(image_bytes, tmp_path, data):
    from opbyop.device.image import DeviceImage

    blob = bytearray(image_bytes)
    for _ in range(data.draw(st.integers(1, 8), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "overwrite"]), label="kind")
        at = data.draw(st.integers(0, max(len(blob) - 1, 0)), label="at")
        if kind == "flip" and blob:
            blob[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif kind == "truncate":
            del blob[at:]
        elif kind == "insert":
            blob[at:at] = data.draw(st.binary(max_size=16), label="bytes")
        else:
            chunk = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
            blob[at:at + len(chunk)] = chunk
    path = tmp_path / "mutated.zip"
    path.write_bytes(bytes(blob))
    try:
        DeviceImage.load(path)
    except ImageError:
        pass


MEMBER_NAMES = ["manifest.json", "constants.npz", "device.json", "programs/main.ttnn_runtime.mlir", "../x", "/abs",
                "a\\b", "c:/x", "x"]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(MEMBER_NAMES), st.binary(max_size=64),
                          st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                           zipfile.ZIP_LZMA])), max_size=6))
def test_arbitrary_archives_load_or_raise_an_image_error(tmp_path_factory, members):
    from opbyop.device.image import DeviceImage

    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zf:
        warnings.simplefilter("ignore")  # duplicate names are part of the fuzz
        for name, payload, method in members:
            zf.writestr(name, payload, compress_type=method)
    path = tmp_path_factory.mktemp("arch") / "image.zip"
    path.write_bytes(buf.getvalue())
    with pytest.raises(ImageError):  # none of these is a whole, valid image
        DeviceImage.load(path)
