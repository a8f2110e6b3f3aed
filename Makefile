# The two commands that matter on a fresh machine:
#   make run    set up, then analyse the default zoo model through the whole pipeline
#   make test   set up, then run the test suite (what .ci/run runs)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODELS ?=

.PHONY: setup run test browser clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel on local disk. An unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip check
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/opbyop analyze $(MODELS)

# Headless Chromium renders the HTML report in the tests (Debian's package; no browser download).
browser:
	@command -v chromium >/dev/null || apt-get install -y --no-install-recommends chromium \
		|| (apt-get update && apt-get install -y --no-install-recommends chromium)

# pytest exits 5 when it collects nothing: a suite that ran no test proves nothing, so that fails.
test: setup browser
	@$(PY) -m pytest -q; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$status

clean:
	rm -rf $(VENV) .opbyop .pytest_cache
