"""The simulated Tenstorrent device: chip model, memory, TTNN executor, op placement, runtime API,
device image. It executes the TTNN programs tt-mlir emits, numerically, with the chip's data formats.
"""
