# kquota: `make demo` and `make test` work on a fresh machine (they make .venv, install
# what is needed and build the extension in release mode). `make help` lists the targets.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
DEPS   := $(VENV)/.deps-installed
EXT    := $(VENV)/.extension-built
RUST_SOURCES := $(shell find rust -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock
LOOM_TARGET  := target/loom

# Tools built from crates.io, once per machine, into a cache outside the clone that every
# clone and CI run reuses; pinned by version (a new version builds beside the old one).
KQUOTA_CACHE  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kquota
TANSU_VERSION := 0.6.0
TANSU         := $(KQUOTA_CACHE)/tansu-$(TANSU_VERSION)/bin/tansu
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ    := $(KQUOTA_CACHE)/cargo-fuzz-$(CARGO_FUZZ_VERSION)/bin/cargo-fuzz
export CARGO_FUZZ
# Apache Kafka's jars from Maven Central, for the real brokers and the quota oracle in the
# tests. apache-kafka/pom.xml pins the versions: a 4.x broker by default, 3.9 with -P kafka-3,
# the newest 4.x with -P kafka-newest.
KAFKA_VERSION  := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' apache-kafka/pom.xml | sed -n 1p)
KAFKA3_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' apache-kafka/pom.xml | sed -n 2p)
KAFKA_NEWEST_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' apache-kafka/pom.xml | sed -n 3p)
KAFKA          := $(KQUOTA_CACHE)/kafka-$(KAFKA_VERSION)/.complete
KAFKA3         := $(KQUOTA_CACHE)/kafka-$(KAFKA3_VERSION)/.complete
KAFKA_NEWEST   := $(KQUOTA_CACHE)/kafka-$(KAFKA_NEWEST_VERSION)/.complete
# The GitHub workflows' linter, built with Go from its module.
ACTIONLINT_VERSION := 1.7.12
ACTIONLINT    := $(KQUOTA_CACHE)/actionlint-$(ACTIONLINT_VERSION)/bin/actionlint

# The tests read ../shared (the semantics spec and Kafka's conformance vectors).
SHARED ?= ../shared

.DEFAULT_GOAL := help
.PHONY: help tools demo test check-shared test-rust test-loom test-python test-corpora soak fuzz fuzz-oracle kafka-workload lint docs format bench bench-quick bench-rust bench-python build clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-13s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Dependencies come from pyproject.toml (runtime and every extra: dev, docs, spark, proxy): one
# source of truth.
$(DEPS): pyproject.toml | $(PY)
	$(PY) -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
	  b = p['build-system']['requires']; d = p['project']; x = d['optional-dependencies']; \
	  print('\n'.join(b + d['dependencies'] + [r for extra in x.values() for r in extra]))" \
	  > $(VENV)/requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/requirements.txt
	touch $@

$(EXT): $(DEPS) $(RUST_SOURCES) pyproject.toml
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet
	touch $@

build: $(EXT) ## Build the extension (release) into .venv

# The Kafka-compatible broker behind `kquota proxy` in the tests (about 30 min on 2 cores,
# the first time on a machine). `memory://` storage needs the dynostore feature.
$(TANSU):
	@echo "Building Tansu $(TANSU_VERSION) into $(dir $@) (once per machine; about 30 minutes on 2 cores)"
	cargo install tansu --version $(TANSU_VERSION) --locked --no-default-features \
	  --features dynostore --root $(KQUOTA_CACHE)/tansu-$(TANSU_VERSION) --quiet

# cargo-fuzz, to build the cargo fuzz targets (replayed by make test, fuzzed by make fuzz).
$(CARGO_FUZZ):
	cargo install cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked \
	  --root $(KQUOTA_CACHE)/cargo-fuzz-$(CARGO_FUZZ_VERSION) --quiet

# actionlint, to check .github/workflows (make lint).
$(ACTIONLINT):
	GOBIN=$(dir $@) go install github.com/rhysd/actionlint/cmd/actionlint@v$(ACTIONLINT_VERSION)

# A Kafka's runtime classpath, copied whole into a fresh folder, then marked complete.
$(KQUOTA_CACHE)/kafka-%/.complete: apache-kafka/pom.xml
	rm -rf $(dir $@) $(@D).partial
	mvn -q -B -f apache-kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=$(@D).partial/libs \
	  $(if $(filter $*,$(KAFKA3_VERSION)),-P kafka-3) $(if $(filter $*,$(KAFKA_NEWEST_VERSION)),-P kafka-newest)
	mv $(@D).partial $(@D)
	touch $@

# Chromium from the distribution's packages (Debian's `chromium`), for the tests that open the
# back-test report in a real browser through Playwright (which never downloads a browser of
# its own here). Installed only when missing; needs root or sudo.
CHROMIUM := /usr/bin/chromium
ROOT     := $(if $(filter 0,$(shell id -u)),,sudo)
$(CHROMIUM):
	@echo "Installing Chromium from Debian's packages (for the report's browser tests)"
	$(ROOT) apt-get update -qq && $(ROOT) apt-get install -y chromium

tools: $(TANSU) $(CARGO_FUZZ) $(ACTIONLINT) $(KAFKA) $(KAFKA3) $(KAFKA_NEWEST) $(CHROMIUM) ## Build or fetch the pinned tools into $(KQUOTA_CACHE), and Chromium

# The demo back-tests generated traffic twice. The main run is closed loop: clients honour
# throttles (KIP-219), as Kafka clients do, so it tells the delays they would see. The
# open-loop run beside it replays the recorded times as if clients ignored throttles, so it
# tells how far the recorded demand exceeds the quotas. The closed-loop back-test is timed
# against the floor job on the same traffic (benches/floor_job.py: read, repartition by
# broker, sort by time, identity mapInArrow, write two columns), both as whole processes on
# the same master: the back-test should take at most 3 times as long.
DEMO_MASTER ?= local[*]
DEMO_SCALES := 0.5,1,2
demo: $(EXT) ## Back-test 3M generated requests on Spark, closed and open loop (what-if x0.5/x1/x2, recommendations)
	$(PY) -m kquota gen-traffic --out demo-out/traffic.parquet --requests 3000000 --quotas-out demo-out/quotas.json
	@echo; echo "== Closed loop: clients honour throttles, as Kafka clients do"
	@start=$$(date +%s.%N); \
	$(PY) -m kquota backtest --traffic demo-out/traffic.parquet --quotas demo-out/quotas.json --out demo-out/backtest --mode closed --scale $(DEMO_SCALES) --recommend --master '$(DEMO_MASTER)' || exit $$?; \
	middle=$$(date +%s.%N); \
	echo; echo "== Open loop, the same traffic: clients ignore throttles"; \
	$(PY) -m kquota backtest --traffic demo-out/traffic.parquet --quotas demo-out/quotas.json --out demo-out/backtest-open --mode open --scale $(DEMO_SCALES) --master '$(DEMO_MASTER)' || exit $$?; \
	echo; echo "Timing the floor job on the same traffic (benches/floor_job.py)"; \
	floor=$$(date +%s.%N); \
	$(PY) benches/floor_job.py --traffic demo-out/traffic.parquet --out demo-out/floor --master '$(DEMO_MASTER)' > /dev/null || exit $$?; \
	end=$$(date +%s.%N); \
	echo; \
	echo "Closed loop is what clients that honour throttles would see; open loop replays the recorded times, so it shows how far the recorded demand exceeds the quotas."; \
	awk -v s=$$start -v m=$$middle -v f=$$floor -v e=$$end 'BEGIN { b = m - s; j = e - f; \
	  printf "back-test (closed loop): %.1f s; floor job: %.1f s; back-test / floor job = %.2fx (target: at most 3x)\n", b, j, b / j }'
	@echo "The report is $(abspath demo-out/backtest/report.html) (open loop: $(abspath demo-out/backtest-open/report.html))"

test: check-shared test-rust test-loom test-python test-corpora ## Run every test: core (cargo + loom), Python, fuzz corpora replayed

check-shared:
	@test -d $(SHARED)/conformance || { echo "make test: no $(abspath $(SHARED))/conformance:" \
	  "the tests need the shared folder (spec and Kafka's conformance vectors) beside this" \
	  "checkout, as ../shared" >&2; exit 2; }

test-rust: ## cargo test on the core crate and the proxy's data path
	cargo test -p kquota-core -p kquota-proxy --quiet

test-loom: ## Model-check the core's atomic protocols with loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$(LOOM_TARGET) cargo test -p kquota-core --release --test loom --quiet

# Repeated real-client runs through kquota proxy, every acknowledged message read back from
# the brokers: SOAK_RUNS runs of each setup (tests/proxy/test_delivery.py) and of each fault
# behind the gateway (tests/proxy/test_gateway_faults.py), about half a minute a run.
SOAK_RUNS ?= 50
SOAK_TESTS ?= tests/proxy/test_delivery.py tests/proxy/test_gateway_faults.py

soak: check-shared $(EXT) $(TANSU) $(KAFKA) ## Delivery and fault soak: SOAK_RUNS runs of each, nothing acknowledged lost (not in make test)
	$(PY) -m pytest $(SOAK_TESTS) -m soak --soak-runs $(SOAK_RUNS) -s -p no:cacheprovider

FUZZ_SECONDS ?= 30

# Deterministic: every committed corpus, seed and regression input, once each. The atheris
# targets' inputs are replayed by pytest (tests/project/test_fuzz_targets.py).
test-corpora: $(CARGO_FUZZ) ## Replay the cargo fuzz targets' committed inputs (no new inputs)
	bash fuzz/run --replay api_sequence parse request_log frames

fuzz: $(EXT) $(CARGO_FUZZ) ## Fuzz each target for FUZZ_SECONDS (cargo fuzz + atheris); finds are new inputs
	bash fuzz/run $(FUZZ_SECONDS)

# Random traces through Apache Kafka's own quota classes and through kquota, beyond the fixed
# seed make test runs (tests/core/test_kafka_oracle.py): another seed (an int, or random) and
# ORACLE_SCALE times the examples.
ORACLE_SEED  ?= random
ORACLE_SCALE ?= 10

fuzz-oracle: check-shared $(EXT) $(KAFKA) $(KAFKA3) $(KAFKA_NEWEST) ## Random traces against Kafka's quota classes (ORACLE_SEED, ORACLE_SCALE)
	KQUOTA_ORACLE_SEED=$(ORACLE_SEED) KQUOTA_ORACLE_SCALE=$(ORACLE_SCALE) \
	  $(PY) -m pytest tests/core/test_kafka_oracle.py -k with_kafka -p no:cacheprovider

# Six clients at once on a real broker of KAFKA_WORKLOAD_VERSION: Kafka's own quotas, the
# back-test of its request log and the gateway, each against what Kafka did.
KAFKA_WORKLOAD_VERSION ?= $(KAFKA_NEWEST_VERSION)

kafka-workload: check-shared $(EXT) $(KAFKA) $(KAFKA3) $(KAFKA_NEWEST) ## Kafka's quotas vs the back-test and the gateway, six clients at once (~4 min)
	$(PY) benches/kafka_workload.py --version $(KAFKA_WORKLOAD_VERSION)

test-python: check-shared $(EXT) $(TANSU) $(KAFKA) $(KAFKA3) $(KAFKA_NEWEST) $(CHROMIUM) ## pytest (conformance, Kafka as the oracle, kquota proxy against Tansu, the report in Chromium)
	$(PY) -m pytest

lint: $(DEPS) $(ACTIONLINT) ## rustfmt, clippy, ruff, mypy, stubtest, actionlint, the docs build
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benches examples fuzz/python docs/_ext .github/scripts
	$(VENV)/bin/ruff format --check python tests benches examples fuzz/python docs/_ext .github/scripts
	$(VENV)/bin/mypy
	$(PY) -m mypy.stubtest kquota._core
	$(ACTIONLINT) .github/workflows/*.yml
	$(MKDOCS_BUILD)

# The site is built from the sources (mkdocstrings reads python/ and the _core.pyi stubs),
# so it needs the docs extra but not the compiled extension.
MKDOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs: $(DEPS) ## Build the documentation site (mkdocs build --strict)
	$(MKDOCS_BUILD)
	@echo "The site is $(abspath site)/index.html"

format: $(DEPS) ## Format Rust and Python sources
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benches examples fuzz/python docs/_ext .github/scripts
	$(VENV)/bin/ruff check --fix python tests benches examples fuzz/python docs/_ext .github/scripts

bench: bench-rust bench-python ## All benchmarks (not part of make test); prints the table, writes it to benches/README.md
	$(PY) benches/report.py

# The same set in a few minutes: criterion's short times, KQUOTA_BENCH_QUICK read by benches/.
bench-quick: export KQUOTA_BENCH_QUICK := 1
bench-quick: CRITERION_ARGS := --warm-up-time 0.5 --measurement-time 1.5
bench-quick: bench ## make bench in under 5 minutes (fewer rounds, smaller Spark inputs)

# The request-log bench reads generated lines too (tests/support/requestlog_gen.py).
REQUEST_LOG_BENCH := target/request-log-bench/broker-0/kafka-request.log

bench-rust: $(DEPS) ## criterion: core record-and-check (vs a locked map and governor), replay kernel, memory per sensor, request-log JSON parsers
	cargo bench -p kquota-core --bench record -- $(CRITERION_ARGS)
	cargo bench -p kquota-core --bench replay -- $(CRITERION_ARGS)
	cargo bench -p kquota-core --bench memory
	PYTHONPATH=tests/support $(PY) -c "import requestlog_gen as g; \
	  g.write_repeated(g.LogSpec(requests=2000, brokers=1, seed=5), 'target/request-log-bench', 20000)"
	KQUOTA_REQUEST_LOG=$(abspath $(REQUEST_LOG_BENCH)) cargo bench -p kquota-core --bench request_log -- $(CRITERION_ARGS)

# The proxy benchmarks' floor: a Rust relay (an example of rust/kquota-proxy), bytes or frames.
RELAY := target/release/examples/kquota-relay
$(RELAY): $(RUST_SOURCES)
	cargo build --release -p kquota-proxy --example kquota-relay --quiet

bench-python: $(EXT) $(RELAY) ## pytest-benchmark: Python record against the model, limits, token-bucket
	$(PY) -m pytest benches -p no:cacheprovider --benchmark-only --benchmark-columns=min,mean,median,ops

clean: ## Remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV) site .pytest_cache .ruff_cache .mypy_cache
