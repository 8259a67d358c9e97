# kquota: `make demo` and `make test` work on a fresh machine (they make .venv, install
# what is needed and build the extension in release mode). `make help` lists the targets.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
DEPS   := $(VENV)/.deps-installed
EXT    := $(VENV)/.extension-built
RUST_SOURCES := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock
LOOM_TARGET  := target/loom

.DEFAULT_GOAL := help
.PHONY: help demo test test-rust test-loom test-python test-fuzz lint format bench bench-quick bench-rust bench-python build clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-13s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Dependencies come from pyproject.toml (runtime, `dev` and `spark` extras): one source of truth.
$(DEPS): pyproject.toml | $(PY)
	$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
	  b = p['build-system']['requires']; d = p['project']; x = d['optional-dependencies']; \
	  print('\n'.join(b + d['dependencies'] + x['dev'] + x.get('spark', [])))" > $(VENV)/requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/requirements.txt
	touch $@

$(EXT): $(DEPS) $(RUST_SOURCES) pyproject.toml
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet
	touch $@

build: $(EXT) ## Build the extension (release) into .venv

demo: $(EXT) ## Back-test 3M generated requests on Spark (what-if x0.5/x1/x2, recommendations)
	$(PY) -m kquota gen-traffic --out demo-out/traffic.parquet --requests 3000000 --quotas-out demo-out/quotas.json
	$(PY) -m kquota backtest --traffic demo-out/traffic.parquet --quotas demo-out/quotas.json --out demo-out/backtest --scale 0.5,1,2 --recommend
	@echo "The report is $(abspath demo-out/backtest/report.html)"

test: test-rust test-loom test-python test-fuzz ## Run every test: core (cargo + loom), Python, bounded fuzzing

test-rust: ## cargo test on the core crate
	cargo test -p kquota-core --quiet

test-loom: ## Model-check the core's atomic protocols with loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) cargo test -p kquota-core --release --test loom --quiet

FUZZ_SECONDS ?= 30

test-fuzz: $(EXT) ## Fuzz each target for FUZZ_SECONDS (cargo fuzz + atheris; fuzz/run)
	bash fuzz/run $(FUZZ_SECONDS)

test-python: $(EXT) ## pytest (conformance vectors included)
	$(PY) -m pytest

lint: $(DEPS) ## rustfmt, clippy -D warnings, ruff, mypy, stubtest of _core.pyi
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benches examples fuzz/python
	$(VENV)/bin/ruff format --check python tests benches examples fuzz/python
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest kquota._core

format: $(DEPS) ## Format Rust and Python sources
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benches examples fuzz/python
	$(VENV)/bin/ruff check --fix python tests benches examples fuzz/python

bench: bench-rust bench-python ## All benchmarks (not part of make test); prints the table, writes it to README
	$(PY) benches/report.py

# The same set in a few minutes: criterion's short times, KQUOTA_BENCH_QUICK read by benches/.
bench-quick: export KQUOTA_BENCH_QUICK := 1
bench-quick: CRITERION_ARGS := --warm-up-time 0.5 --measurement-time 1.5
bench-quick: bench ## make bench in under 5 minutes (fewer rounds, smaller Spark inputs)

bench-rust: ## criterion: core record-and-check (vs a locked map and governor), memory per sensor
	cargo bench -p kquota-core --bench record -- $(CRITERION_ARGS)
	cargo bench -p kquota-core --bench memory

bench-python: $(EXT) ## pytest-benchmark: Python record against the model, limits, token-bucket
	$(PY) -m pytest benches -p no:cacheprovider --benchmark-only --benchmark-columns=min,mean,median,ops

clean: ## Remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
