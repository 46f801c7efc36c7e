# Two commands matter: `make run` and `make test`. Both build .venv from scratch when it is
# missing (or when the lock files change) and use an embedded PostgreSQL unless told otherwise.
# PYTHON picks the interpreter (CPython 3.11 through 3.14), VENV the venv's folder.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.switchboard-installed

.PHONY: run test lint format migrate install clean-data help bench bench-quick drills n8n-e2e n8n-nodes console-screenshots

help:
	@echo "make run     serve the API (and scheduler) on \$${SWITCHBOARD_HOST:-127.0.0.1}:\$${SWITCHBOARD_PORT:-8080}"
	@echo "make test    run the whole test suite against a real PostgreSQL (two processes; TEST_WORKERS=0: one)"
	@echo "make lint    ruff (lint + format check) and mypy --strict"
	@echo "make migrate apply migrations to SWITCHBOARD_DATABASE_URL (or the embedded server)"
	@echo "make bench   benchmarks against their ceilings (bench-quick: under 3 minutes)"
	@echo "make drills  fault drills (own embedded PostgreSQL, bounded, 127.0.0.1 only)"
	@echo "make n8n-e2e the n8n workflows and nodes in a real n8n (npm installs it once into ~/.cache/switchboard)"
	@echo "make n8n-nodes the n8n node package: npm ci, build, lint, tests against a live Switchboard"
	@echo "make console-screenshots  the operator console's screenshots in docs/console/ (headless Chromium)"

# Checked on every run by scripts/venv.sh: CPython 3.11 through 3.14 (else a one-line message
# naming the range and PYTHON=...), a venv built by another Python than a chosen PYTHON is
# rebuilt, lock files newer than the last install are installed. VENV=.venv-3.13 keeps a
# second venv beside the first (CI does).
.PHONY: $(STAMP)
$(STAMP):
	@PYTHON='$(PYTHON)' PYTHON_ORIGIN='$(origin PYTHON)' VENV='$(VENV)' ./scripts/venv.sh

install: $(STAMP)

run: $(STAMP)
	$(BIN)/switchboard serve

migrate: $(STAMP)
	$(BIN)/switchboard migrate

# scripts/chromium.sh puts Debian's chromium on the machine (as root) for the console's browser
# tests; without one they skip, saying why. The suite runs in TEST_WORKERS processes
# (pytest-xdist, 2 by default): most of a run waits on PostgreSQL, subprocesses and timers, which
# a second process overlaps (measured in .ci/run's header). TEST_WORKERS=0, PYTEST_ARGS="-n 0"
# or PYTEST_ARGS="-p no:xdist" runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	@./scripts/chromium.sh
	$(BIN)/python -m pytest $(if $(findstring no:xdist,$(PYTEST_ARGS)),,-n $(TEST_WORKERS)) $(PYTEST_ARGS)

# The console's screenshots in docs/console/ (shown in the README), taken by its browser tests.
console-screenshots: $(STAMP)
	@./scripts/chromium.sh
	SWITCHBOARD_CONSOLE_SCREENSHOTS=docs/console $(BIN)/python -m pytest \
	    tests/integration/test_console_browser.py -k round_trip $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run --quick

drills: $(STAMP)
	$(BIN)/python -m pytest -m drill $(PYTEST_ARGS)
	$(BIN)/python -m drills.postgres_restart
	$(BIN)/python -m drills.kill_during_sweep
	$(BIN)/python -m drills.kill_during_webhook_writes
	$(BIN)/python -m drills.three_replicas_one_day
	$(BIN)/python -m drills.task_queue
	$(BIN)/python -m drills.fuzz
	$(BIN)/python -m drills.header_flood

# The n8n community node package (n8n-nodes/): its tests start a live Switchboard from this venv
# on the suite's PostgreSQL (SWITCHBOARD_TEST_DATABASE_URL, else the embedded one).
n8n-nodes: $(STAMP)
	cd n8n-nodes && npm ci --no-audit --no-fund && npm run build && npm run lint && npm test

# Not part of `make test`: installs n8n with npm (once, minutes) and runs it. N8N_E2E_ARGS=--record
# writes the run into n8n-workflows/README.md.
n8n-e2e: $(STAMP)
	$(BIN)/python -m drills.n8n_e2e $(N8N_E2E_ARGS)

# Refuses (exit 1, nothing deleted) while a process still uses the embedded server; stops one
# whose users all died. Without a venv it only checks that no postgres runs on the directory.
clean-data:
	@if [ -x $(BIN)/switchboard ]; then \
	    SWITCHBOARD_DATA_DIR=.switchboard $(BIN)/switchboard embedded-stop; \
	elif pid=$$(head -n1 .switchboard/pg/postmaster.pid 2>/dev/null) && kill -0 "$$pid" 2>/dev/null \
	        && ps -o command= -p "$$pid" | grep -q postgres; then \
	    echo "make: PostgreSQL (pid $$pid) still runs on .switchboard/pg; stop it first" >&2; \
	    exit 1; \
	fi
	rm -rf .switchboard
