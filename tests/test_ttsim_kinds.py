"""Every TTNN op kind the corpus and the zoo emit has a ttnn call on ttsim, or says why it has none.

Each case is a single-op corpus module compiled by tt-mlir and run op by op through ttnn on ttsim.
Where the compiler surrounds the op with kinds ttnn has no call for, the op is cut out of its
compiled program and run alone, against opbyop's reference reading of the same op. These need
ttsim and ttnn's interpreter (`make ttsim`); without them they fail with the backend's own words.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ttsim_ops import corpus, kinds_of, only_op, run_on_ttsim
from opbyop.device.program import Function, Program, load_program
from opbyop.device.reference.interpreter import read_program
from opbyop.records import Status, TtsimOutcome


def corpus_op(tmp_path, workspace, file: str):
    """The corpus module named `file`, split: its one op that is not a constant."""
    return only_op(tmp_path, workspace, corpus(file), file)


@pytest.mark.slow
@pytest.mark.parametrize("file, kind", [
    ("round_nearest_even-f32-3x50-args.mlir", "ttnn.round"),
    ("bitcast_convert-to_i32-f32-3x50-args.mlir", "ttnn.bitcast_convert"),
    ("bitcast_convert-to_i16-bf16-3x50-args.mlir", "ttnn.bitwise_right_shift"),
    ("dynamic_slice-f32-3x50-args.mlir", "ttnn.slice_dynamic"),
    ("reduce_window-sum_pool-bf16-1x8x8x3-args.mlir", "ttnn.avg_pool2d"),
    ("convolution-conv1d-f32-1x2x16-args.mlir", "ttnn.conv1d"),
    ("while-doubling-f32-s-args.mlir", "ttcore.while_loop"),
    ("case-f32-s-args.mlir", "ttcore.case"),
    ("gather-rows-bf16-8x16-args.mlir", "ttnn.rows_gather"),
    ("gather-embedding-bf16-10x4-args.mlir", "ttnn.rows_gather"),
    ("gather-rows-f32-8x16-args.mlir", "ttnn.rows_gather"),
    ("gather-embedding-i32-10x4-args.mlir", "ttnn.rows_gather"),
    ("scatter-rows_replace-f32-8x4-args.mlir", "ttnn.rows_scatter"),
    ("scatter-rows_add-f32-8x4-args.mlir", "ttnn.rows_scatter"),
    ("collective_permute-f32-4x32-args.mlir", "ttnn.assign"),
    ("gather-elements-f32-5x7-args.mlir", "ttnn.rows_gather"),  # rows_gather's column form: ttnn.gather
    ("gather-elements-bf16-5x7-args.mlir", "ttnn.rows_gather"),
    ("sort-with_indices-f32-3x50-args.mlir", "ttnn.rows_gather"),  # si32 values by index
    ("scatter-elements_add-f32-5x7-args.mlir", "ttnn.rows_scatter"),  # column form, summed
    ("dynamic_update_slice-f32-2x32x64-args.mlir", "ttnn.rows_scatter"),  # windows of rows
    ("dynamic_update_slice-bf16-3x50-args.mlir", "ttnn.rows_scatter"),  # a 2-D window of elements
    ("pad-f32-3x50-args.mlir", "ttnn.rows_scatter"),
    ("dynamic_slice-f32-13-args.mlir", "ttnn.slice_dynamic"),  # an si32 clamp with integer bounds
    ("sort-GT-f32-3x50-args.mlir", "ttnn.sort"),  # these three ran into ttsim v1.10.0's SFPU compare checks
    ("batch_norm_inference-f32-2x3x4x4-args.mlir", "ttnn.batch_norm_inference"),
    ("batch_norm_training-f32-2x3x4x4-args.mlir", "ttnn.batch_norm_training"),
])
def test_the_op_kind_runs_on_ttsim_and_matches_xla(tmp_path, workspace, worker, on_ttsim, ttsim_ready, file, kind):
    result = worker.analyze(corpus_op(tmp_path, workspace, file), on_ttsim, timeout=600)
    assert kind in kinds_of(workspace, result)  # the compiler emitted the kind under test
    assert result.ttsim is not None and result.ttsim.outcome is TtsimOutcome.RAN, result.ttsim
    assert result.status is Status.SUCCESS, result.message
    assert result.golden.passed  # integers are compared exactly (no pcc), floats by pcc and tolerance


@pytest.mark.slow
def test_rand_runs_on_ttsim_with_the_compilers_bounds(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    """No golden draws the same random numbers: the op runs, and nothing is judged."""
    result = worker.analyze(corpus_op(tmp_path, workspace, "rng-uniform-f32-s-args.mlir"), on_ttsim, timeout=600)
    assert result.ttsim.outcome is TtsimOutcome.RAN, result.ttsim
    assert result.status is Status.SKIPPED


@pytest.mark.slow
@pytest.mark.parametrize("file, kind, words", [
    ("concatenate-ui8-13-args.mlir", "ttnn.concat", "tensix_pacr"),
    ("reduce-max-ui32-3x50-args.mlir", "ttnn.max", "tensix_unpacr"),
])
def test_a_mapped_op_kind_that_ttsim_cannot_run_is_ttsims_limit_named_in_that_op(tmp_path, workspace, worker, on_ttsim,
                                                                                  ttsim_ready, file, kind, words):
    """The call is made (never `not_simulated`): ttsim v1.10 stops inside the kernel, in its own words."""
    result = worker.analyze(corpus_op(tmp_path, workspace, file), on_ttsim, timeout=600)
    assert result.status is Status.SIMULATOR_LIMIT, result.message
    assert result.ttsim.op == kind and words in result.ttsim.message


@pytest.mark.slow
def test_tt_metal_refusing_an_f32_pool_is_a_device_failure_in_its_words(tmp_path, workspace, worker, on_ttsim,
                                                                       ttsim_ready):
    result = worker.analyze(corpus_op(tmp_path, workspace, "reduce_window-sum_pool-f32-1x8x8x3-args.mlir"), on_ttsim,
                            timeout=600)
    assert result.ttsim.outcome is TtsimOutcome.REJECTED and result.ttsim.op == "ttnn.avg_pool2d", result.ttsim
    assert "TT_FATAL" in result.ttsim.message and "BFLOAT16" in result.ttsim.message


@pytest.mark.slow
def test_a_kind_ttnn_has_no_call_for_is_not_simulated_saying_why(tmp_path, workspace, worker, on_ttsim, ttsim_ready):
    result = worker.analyze(corpus_op(tmp_path, workspace, "reduce_precision-e5m2-f32-3x50-args.mlir"), on_ttsim,
                            timeout=600)
    assert result.ttsim.outcome is TtsimOutcome.UNMAPPED and result.ttsim.op == "ttnn.reduce_precision"
    assert "has no call in ttnn 0.81.1" in result.ttsim.message and "exponent and mantissa" in result.ttsim.message


def cut(program: Program, kind: str) -> Program:
    """The program's one `kind` op alone: its tensor operands become the arguments, its results the returns."""
    main = program.main
    (op,) = [o for o in main.ops if o.name == kind]
    tensors = [(v, t) for v, t in zip(op.operands, op.operand_types) if t is not None]
    alone = Function(name=main.name, kind=main.kind, arguments=[v for v, _ in tensors],
                     argument_types=[t for _, t in tensors], ops=[op], returns=list(op.results),
                     return_types=list(op.result_types))
    return dataclasses.replace(program, functions={main.name: alone})


def compiled(tmp_path, workspace, worker, settings, file: str) -> Program:
    compile_only = settings.model_copy(update={"run_device": False, "run_golden": False})
    result = worker.analyze(corpus_op(tmp_path, workspace, file), compile_only, timeout=600)
    return load_program(workspace.artifacts.read_text(result.compile.artifacts["ttnn_runtime"]))


@pytest.mark.slow
@pytest.mark.parametrize("file, kind", [
    ("select_and_scatter-max_pool_grad-bf16-1x8x8x3-args.mlir", "ttnn.max_pool2d_with_indices"),
    ("convolution-transposed-f32-1x4x5x5-args.mlir", "ttnn.conv_transpose2d"),
])
def test_the_op_kind_cut_from_its_program_runs_on_ttsim_as_its_reference_reading(tmp_path, workspace, worker, settings,
                                                                               workspace_root, ttsim_ready, file, kind):
    """Both come between ops ttnn has no call for (tt-mlir's rows_gather / rows_scatter), so the op
    runs alone, on inputs whose every value a bf16 holds exactly."""
    program = cut(compiled(tmp_path, workspace, worker, settings, file), kind)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-8, 8, t.shape).astype(np.float32) / 4 for t in program.main.argument_types]
    ran = run_on_ttsim(workspace_root, tmp_path, program, inputs)
    assert ran.run.outcome is TtsimOutcome.RAN, ran.run
    reference = read_program(program, inputs).outputs
    values = ran.outputs[0].astype(np.float64)
    assert np.allclose(values, np.asarray(reference[0], np.float64).reshape(values.shape), atol=0.05, rtol=0.02)
    if kind == "ttnn.max_pool2d_with_indices":  # each index names an input element holding the maximum
        flat = inputs[0].reshape(-1, inputs[0].shape[-1])
        index = ran.outputs[1].astype(np.int64).reshape(-1, flat.shape[1])
        assert np.array_equal(np.take_along_axis(flat, index, axis=0), values.reshape(index.shape))


@pytest.mark.slow
@pytest.mark.parametrize("file, kind, indices, attrs", [
    # starts past either end: clamped into the table (StableHLO gather), or zeros with fill_out_of_bounds
    ("gather-rows-f32-8x16-args.mlir", "ttnn.rows_gather", [7, -3, 12, 0, 9], {}),
    ("gather-rows-f32-8x16-args.mlir", "ttnn.rows_gather", [7, -3, 12, 0, 9], {"fill_out_of_bounds": True}),
    # a row replaced twice (the last wins) and a row outside the operand (skipped, as StableHLO's scatter skips it)
    ("scatter-rows_replace-f32-8x4-args.mlir", "ttnn.rows_scatter", [5, 5, 9], {}),
    ("scatter-rows_add-f32-8x4-args.mlir", "ttnn.rows_scatter", [5, 5, -1], {}),
])
def test_rows_ops_read_their_indices_as_stablehlo_does_on_ttsim(tmp_path, workspace, worker, settings, workspace_root,
                                                                ttsim_ready, file, kind, indices, attrs):
    """The cases a program's own clamp never shows: the row op cut from its program, given indices past the
    operand's ends, gives on ttsim what opbyop's reference reading of it gives, bit for bit."""
    program = cut(compiled(tmp_path, workspace, worker, settings, file), kind)
    (op,) = program.main.ops
    op.attrs.update(attrs)
    index_type = program.main.argument_types[1]
    index_shape = (*index_type.shape[:-1], len(indices))
    program.main.argument_types[1] = dataclasses.replace(index_type, shape=index_shape)
    op.operand_types[1] = program.main.argument_types[1]
    if kind == "ttnn.rows_scatter":
        updates = program.main.argument_types[2]
        program.main.argument_types[2] = op.operand_types[2] = dataclasses.replace(
            updates, shape=(*updates.shape[:-2], len(indices), updates.shape[-1]))
    if kind == "ttnn.rows_gather":
        out = op.result_types[0]
        op.result_types[0] = program.main.return_types[0] = dataclasses.replace(
            out, shape=(*out.shape[:-2], len(indices), out.shape[-1]))
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-8, 8, t.shape).astype(np.float32) / 4 for t in program.main.argument_types]
    inputs[1] = np.asarray(indices, np.int32).reshape(index_shape)
    ran = run_on_ttsim(workspace_root, tmp_path, program, inputs)
    assert ran.run.outcome is TtsimOutcome.RAN, ran.run
    reference = np.asarray(read_program(program, inputs).outputs[0], np.float32)
    assert np.array_equal(ran.outputs[0].reshape(reference.shape), reference)
