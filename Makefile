# The two commands that matter on a fresh machine:
#   make run    set up, then analyse the default zoo model through the whole pipeline
#   make test   set up, then run the test suite (what .ci/run runs)
#   make test-fast   the unit tests of every package, without the slow ones (under 5 minutes)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODELS ?=
TEST_JOBS ?= 2
# pytest over tests/ in TEST_JOBS processes, a test file to each (see `test` below)
PYTEST := $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile
# Tenstorrent's stack without silicon (`--device ttsim`): tt-metal's ttnn in its own Python 3.12
# environment (ttnn has cp310/cp312 wheels only and pins numpy < 2), and ttsim built from source.
TTNN_VENV ?= .venv-ttnn
TTSIM_SRC ?= ../shared/third_party/ttsim
TTSIM_LIB := .ttsim/libttsim_bh.so
# opbyop's patches to ttsim (where it refuses what Tenstorrent's ISA documentation defines), in the order
# their `series` file lists them: a changed patch rebuilds the library
TTSIM_PATCHES := opbyop/device/ttsim/patches
TTSIM_SERIES := $(TTSIM_PATCHES)/series $(addprefix $(TTSIM_PATCHES)/,$(shell cat $(TTSIM_PATCHES)/series 2>/dev/null))
# TT-NN Visualizer (`opbyop visualize`) in its own environment: it pins pydantic and tt-perf-report
# versions the project's environment cannot share.
VISUALIZER_VENV ?= .venv-visualizer
VISUALIZER_VERSION ?= 0.108.0
# pyenv's own 3.12 before any `python3.12` on PATH (a pyenv shim there fails when 3.12 is not selected)
PY312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) \
                    $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))

.PHONY: setup run test test-fast browser ttsim visualizer clean

# uv installs the same wheels as pip, from the same places, in seconds instead of minutes. It reads no
# pip configuration: pip's find-links (where the CPU torch wheel lies) and extra indexes, from every
# scope pip reads (PIP_* variables, the user's, the machine's files), are handed to it, and every index
# counts as pip counts them (best match, not the first index naming a package).
UV := $(VENV)/bin/uv
PIP_SETTING = $(shell python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$(1)='\(.*\)'$$/\1/p" | sort -u)
UV_SOURCES = --index-strategy unsafe-best-match $(addprefix --find-links ,$(call PIP_SETTING,find-links)) \
             $(addprefix --extra-index-url ,$(call PIP_SETTING,extra-index-url))

# --compile-bytecode, as pip does: without it the first run spends seconds compiling what it imports.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	# torch first, pinned: the CPU wheel on local disk. An unpinned torch pulls a multi-GB CUDA build.
	$(UV) pip install --quiet --python $(PY) $(UV_SOURCES) "torch==2.13.0"
	@$(PY) -c "import importlib.metadata as m, sys; v = m.version('torch'); \
	  sys.exit(0 if v.endswith('+cpu') else f'torch {v} is not the CPU build: fix the pip find-links')"
	$(UV) pip install --quiet --compile-bytecode --python $(PY) $(UV_SOURCES) -e ".[test]"
	$(UV) pip check --python $(PY)
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/opbyop analyze $(MODELS)

# The side environments are installed with the project's uv too (hence $(STAMP) first).
$(TTNN_VENV)/.installed: $(STAMP)
	@test -n "$(PY312)" || { echo "ttsim needs Python 3.12 for ttnn: install python3.12 or set PY312=" >&2; exit 1; }
	$(PY312) -m venv $(TTNN_VENV)
	$(UV) pip install --quiet --python $(TTNN_VENV)/bin/python $(UV_SOURCES) "ttnn==0.81.1"
	touch $@

# ttsim's source is copied first (its tree may be read-only), then patched with opbyop's series; the
# patched tree stays beside the library (the library's name and multichip builds come from it).
$(TTSIM_LIB): $(TTSIM_SERIES) opbyop/device/ttsim/series.py
	@test -f $(TTSIM_SRC)/make.py || { echo "no ttsim source at $(TTSIM_SRC): set TTSIM_SRC=" >&2; exit 1; }
	rm -rf .ttsim/src $@ && mkdir -p .ttsim && cp -r $(TTSIM_SRC) .ttsim/src && chmod -R u+w .ttsim/src
	python3 opbyop/device/ttsim/series.py apply .ttsim/src
	cd .ttsim/src && python3 make.py -j2 src/_out/release_bh/libttsim.so
	cp .ttsim/src/src/_out/release_bh/libttsim.so $@

ttsim: $(TTNN_VENV)/.installed $(TTSIM_LIB)

$(VISUALIZER_VENV)/.installed: $(STAMP)
	python3 -m venv $(VISUALIZER_VENV)
	$(UV) pip install --quiet --python $(VISUALIZER_VENV)/bin/python $(UV_SOURCES) "ttnn-visualizer==$(VISUALIZER_VERSION)"
	touch $@

visualizer: $(VISUALIZER_VENV)/.installed

# Headless Chromium renders the HTML report in the tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null || apt-get install -y --no-install-recommends chromium \
		|| (apt-get update && apt-get install -y --no-install-recommends chromium)

# The suite runs in TEST_JOBS pytest processes (pytest-xdist), a test file to a process, so a file's
# shared servers, clusters and compilers start once. Many tests wait (a server starting, a poll, a
# child process): a second file fills those waits. On 2 cores with a CPU hog beside, the suite takes
# 18 min this way and 25 min in one process. pytest exits 5 when it collects nothing: a suite that ran
# no test proves nothing, so that fails.
test: setup browser ttsim visualizer
	@$(PYTEST); status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$status

# The fast lane: every test not marked slow (pyproject.toml says which are), each stopped after 300 s; the
# slowest ten are listed so that a slow newcomer shows.
test-fast: setup
	@$(PYTEST) -m "not slow" --timeout=300 --durations=10; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$status

clean:
	rm -rf $(VENV) $(TTNN_VENV) $(VISUALIZER_VENV) .ttsim .opbyop .pytest_cache
