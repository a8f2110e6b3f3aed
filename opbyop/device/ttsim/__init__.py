"""The ttsim device backend: each op's TTNN program run by tt-metal's own kernels (PyPI's ttnn) on
Tenstorrent's simulator ttsim, beside opbyop's model of the chip.

install: where ttsim and ttnn's interpreter are found, and how they are prepared; series: opbyop's
patches to ttsim (patches/) and the name of the ttsim a library was built as;
plan: a loaded program as plain data for the runner; runner: the ttnn side, in its own interpreter;
backend: the runner process per worker; agreement: the device model's outputs against ttsim's.
"""
