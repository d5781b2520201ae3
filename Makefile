# Tessera: the two commands a new machine needs are `make devnet` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
ROUNDS  ?= 3

.PHONY: setup setup-python setup-contracts devnet test test-python test-long test-contracts lint typecheck bench clean

setup: setup-python setup-contracts

setup-python: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: its CPU wheel lies on disk here; a looser resolve pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup-contracts: contracts/node_modules/.installed
contracts/node_modules/.installed: contracts/package.json
	cd contracts && (test -f package-lock.json && npm ci --no-audit --no-fund || npm install --no-audit --no-fund)
	touch $@

devnet: setup
	$(BIN)/tessera devnet --rounds $(ROUNDS)

lint: setup-python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: setup-python
	$(BIN)/mypy

test-contracts: setup-contracts
	cd contracts && npm run --silent test

test-python: setup
	$(BIN)/python -m pytest -q -m "not slow" -n 2 --dist loadgroup --durations=40

test: lint typecheck test-contracts test-python

# The long campaign: the tests marked `slow`, which CI's `make test` leaves out.
test-long: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/tessera bench training
	$(BIN)/tessera bench chain
	$(BIN)/tessera bench attestation

clean:
	rm -rf $(VENV) contracts/node_modules contracts/out contracts/cache .pytest_cache .mypy_cache .ruff_cache
