# kvpilot — `make demo` and `make test` work on a fresh Debian machine with Python 3.11.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint bench system-deps generate check-generated clean chaos compile clean-native test-native image

# The container image deploy/base runs: deploy/base/kustomization.yaml names this tag (tests/deploy checks they agree).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE   ?= kvpilot:$(VERSION)

$(STAMP): pyproject.toml
	bash scripts/install-python-venv.sh $(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

system-deps:
	bash scripts/install-system-deps.sh

demo: $(STAMP)
	$(BIN)/kvpilot demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# Builds $(IMAGE) with the first of docker, podman or buildah found; says so and fails where there is none.
image:
	@builder=$$(command -v docker || command -v podman || command -v buildah); \
	if [ -z "$$builder" ]; then \
	  echo "make image: no container builder here (looked for docker, podman, buildah); install one, or run \`docker build -t $(IMAGE) .\` where one is" >&2; \
	  exit 1; \
	fi; \
	if ! "$$builder" info >/dev/null 2>&1; then \
	  echo "make image: $$builder is installed but \`$$builder info\` fails (no engine or daemon answering); start it, or build where one runs" >&2; \
	  exit 1; \
	fi; \
	case "$$builder" in *buildah) verb=bud ;; *) verb=build ;; esac; \
	echo "$$builder $$verb -t $(IMAGE) ."; \
	"$$builder" $$verb -t $(IMAGE) .

# Two workers, each test module whole on one (its module fixtures run once): about half the serial time on the 2-core
# runner, where most of the suite waits on real processes (Prometheus, Alertmanager, PostgreSQL, kvpilot run).
# TEST_WORKERS=0 runs it serially in one process.
TEST_WORKERS ?= 2
test: $(STAMP) system-deps lint check-generated
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope

# The reliability probes of issue 11 on SQLite and a real PostgreSQL; prints a table (probe, expected, observed).
chaos: $(STAMP) system-deps
	$(BIN)/pytest -q -p no:cacheprovider -m reliability tests/reliability

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not integration and not e2e"

bench: $(STAMP) system-deps
	$(BIN)/python bench/parse.py
	$(BIN)/python bench/scrape.py
	$(BIN)/python bench/keda.py
	$(BIN)/python bench/exposition.py
	$(BIN)/python bench/detectors.py
	$(BIN)/python bench/simulator.py
	$(BIN)/python bench/backtest.py

# Optional: the parser and validity checks compiled with mypyc (C extensions next to the sources, git-ignored).
# Without a C compiler it says so and everything runs as Python; KVPILOT_PURE=1 ignores a build.
compile: $(STAMP)
	$(BIN)/python scripts/build_native.py

clean-native:
	find collector -name '*.so' -delete
	rm -rf build/native

# The collector's tests on the compiled modules and then on the pure ones (differential tests included).
test-native: compile
	KVPILOT_EXPECT_NATIVE=1 $(BIN)/pytest -q tests/unit/collector tests/unit/kvpilot/commands/test_scrape.py
	KVPILOT_PURE=1 $(BIN)/pytest -q tests/unit/collector tests/unit/kvpilot/commands/test_scrape.py

# Generated artefacts (dashboards, alert rules, gRPC stubs) are committed; CI fails when they are stale.
generate: $(STAMP)
	$(BIN)/python -m kvpilot.generate

check-generated: $(STAMP)
	$(BIN)/python -m kvpilot.generate --check

clean: clean-native
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
