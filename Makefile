# MCC: two commands set up a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench lint types clean interop

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mcc demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/mcc bench all --net host,netns --json benchmarks/results/perftest.json --record

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

types: $(STAMP)
	$(PY) -m mcc.types.generate

interop:
	cmake -S interop/c -B build/interop -DCMAKE_BUILD_TYPE=Release
	cmake --build build/interop

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
