# Developer entry points. `make test` is the command the README and CI run.
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Reinstall only when the package metadata changes.
STAMP := $(VENV)/.installed

.PHONY: setup run test bench chaos lint down clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(STAMP)

run: setup
	$(BIN)/agentledger up && $(BIN)/agentledger demo

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/agentledger bench

# Each profile on an idle host, then beside one busy loop per core (--hog cores).
chaos: setup
	$(BIN)/agentledger chaos --profile full
	$(BIN)/agentledger chaos --profile full --hog cores
	$(BIN)/agentledger chaos --profile cluster
	$(BIN)/agentledger chaos --profile cluster --hog cores

lint: setup
	$(BIN)/ruff check src contracts services tests
	$(BIN)/mypy src/agentledger/core contracts

down: setup
	$(BIN)/agentledger down

# Stops a running runtime first: deleting its data dir under live servers would orphan them.
# As root the servers also had homes and system users outside .agentledger: removed too.
clean:
	-test -x $(BIN)/agentledger && $(BIN)/agentledger down
	-test -x $(BIN)/python && $(BIN)/python -m agentledger.runtime.hosting clean
	rm -rf .agentledger build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
