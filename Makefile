# Every target works on a fresh machine: the venv is created and the project installed on demand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export RETRY_AUDIT_HOME ?= $(abspath var)

.PHONY: venv test demo ui bench bench-quick lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python -m orchestration.demo

ui: $(STAMP)
	$(BIN)/python -m orchestration.ui

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run_all --quick

lint: $(STAMP)
	$(BIN)/ruff check broker_core assets orchestration tests bench tools

clean:
	rm -rf var .pytest_cache
