# Every target works on a fresh machine: the venv is created and the project installed on demand.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export RETRY_AUDIT_HOME ?= $(abspath var)

.PHONY: venv test test-long test-all demo ui bench bench-quick lint clean conformance

# Test worker processes. Each worker has its own Spark session (and pays its JIT warm-up) and up
# to one real cluster. make test, mostly Spark and DuckDB now, runs in two on 2 cores: 9 min 26 s
# against 10 min 16 s in three, back to back on the same clone. make test-long, mostly real brokers
# waiting, in two too (LONG_WORKERS): in three, on a 2-core CI host, real brokers' elections and
# boots took long enough (a 12 s restart) to change what the clients saw. TEST_WORKERS=N /
# LONG_WORKERS=N to change. A module's tests go
# to one worker (loadscope), so its module-scoped fixtures are built once; --no-loadscope-reorder
# keeps the order tests/conftest.py gives, real-broker tests first. (loadgroup's xdist_group marks
# do not group under pytest 9.2 with pytest-xdist 3.8: it renames a node attribute pytest no longer
# reads.) 0 runs everything in one process.
TEST_WORKERS ?= 2
LONG_WORKERS ?= 2
parallel = $(if $(filter 0,$(1)),,-n $(1) --dist loadscope --no-loadscope-reorder)
PARALLEL = $(call parallel,$(TEST_WORKERS))

venv: $(STAMP)

# constraints.txt pins every package to the version the tests passed with (make lock refreshes it).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Re-resolve the newest versions pyproject.toml allows in a throwaway venv and pin them; then
# `make venv` installs them and `make test` says whether they work.
.PHONY: lock
lock:
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/pip" install -q --upgrade pip; \
	"$$tmp/venv/bin/pip" install -q -e '.[dev]'; \
	{ sed -n '/^#/p' constraints.txt; "$$tmp/venv/bin/pip" freeze --exclude-editable; } > "$$tmp/constraints.txt"; \
	mv "$$tmp/constraints.txt" constraints.txt

# The suite (.ci/run runs it, then test-long): every test but those marked slow or long, real
# RocketMQ 4.9.4 and 5.x brokers included (the 4.9.4 conformance run, a two-broker cluster,
# gRPC, a live import). Tests marked long (the 4.9.4 broker killed and restarted, the 5.x POP and gRPC
# conformance runs, the 5.3.3 record forms, a 5.3.3 tiered store, LMQ and Lite stores, the client trace, a 4.9.4 DLedger group and a 5.3.3 controller-mode pair whose master is
# killed, the 4.9.4 transactional workload, 5.3.3 and 5.5.1 timers, the UI
# in a browser, the crash-safety kill loop, the warehouse benchmark's smoke run: minutes each, mostly waiting) are in test-long; slow ones (a
# standalone Spark cluster, the lineage benchmark's smoke runs, other releases and broker settings)
# only in test-all. The 15 slowest tests are listed at the end; tests/conftest.py adds a line when
# real-broker tests skipped. Measured times: README, "Tests".
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not long" $(PARALLEL) --durations=15 $(PYTEST_ARGS)

# The long tests: what make test leaves out so it stays near ten minutes. CI runs it after make test.
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -m "long and not slow" $(call parallel,$(LONG_WORKERS)) --durations=15 $(PYTEST_ARGS)

# Every test, the slow ones too; a failing seeded test's reproduce line uses this target, so it
# runs whatever the test's marks.
test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Real RocketMQ brokers and clients against the audit and the model (the long workload: 16
# retries to the DLQ, a consumer killed with SIGKILL, refused send-backs, and broker-b killed with
# SIGKILL at 12 s and restarted at 16 s). Needs java, javac and mvn; ROCKETMQ=4.9.4 by default.
ROCKETMQ ?= 4.9.4
BROKER_OUTAGE ?= broker-b@12s-16s
conformance: $(STAMP)
	@for tool in java javac mvn; do command -v $$tool >/dev/null || { \
	  echo "make conformance needs $$tool: apt-get install openjdk-17-jdk-headless maven" >&2; exit 2; }; done
	$(BIN)/retry-audit conformance --rocketmq $(ROCKETMQ) --scenario scenarios/conformance-long.yaml \
	  --out var/conformance/$(ROCKETMQ) $(if $(BROKER_OUTAGE),--broker-outage $(BROKER_OUTAGE))

demo: $(STAMP)
	$(BIN)/python -m orchestration.demo

ui: $(STAMP)
	$(BIN)/python -m orchestration.ui

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run_all --quick

# ruff's rules and complexity limit are in pyproject.toml; .ci/run runs this before the tests.
lint: $(STAMP)
	$(BIN)/ruff check broker_core assets orchestration conformance tests bench tools

clean:
	rm -rf var .pytest_cache
