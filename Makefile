# firefly_orm — the two commands: `make demo` and `make test`.
# Everything is installed into .venv from pyproject.toml, pinned by
# requirements/constraints.txt, so a fresh clone needs nothing else.

PYTHON ?= python3
# Python may write its bytecode caches (__pycache__, git-ignored), whatever the shell
# says: with PYTHONDONTWRITEBYTECODE set, every test worker and every subprocess the
# suite starts compiled the package, and pytest rewrote every test module, from
# source each time (about half of each worker's collection).
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
EXTRAS := postgres,mongo,redis,pydantic-ai,openai-agents,langchain,adk,langgraph,llama-index,tiktoken,encryption,vector,flyte,mcp,otel,docs,dev

# Use the local PostgreSQL when it answers and no URL was given (CI exports its own).
LOCAL_PG_URL := postgresql+psycopg://postgres@127.0.0.1:5432/test
ifeq ($(strip $(FIREFLY_ORM_TEST_POSTGRES_URL)),)
  ifneq ($(shell command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432 && echo yes),)
    export FIREFLY_ORM_TEST_POSTGRES_URL := $(LOCAL_PG_URL)
  endif
endif

PYTEST_ARGS ?=
# pytest-xdist workers: the suite mostly waits on databases and processes, so more
# workers than the 2 cores pay; the fault suite runs in one of them (tests/conftest.py).
PYTEST_WORKERS ?= 4
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

.PHONY: install demo test test-unit test-fast lint ruff types format bench bench-quick migrate clean docs

# pip brings uv (pinned in the constraints), and uv installs the project: the same
# pinned versions as pip would, in seconds instead of minutes. The wheel test builds
# the wheel and installs it into a fresh venv with the same uv.
UV := $(VENV)/bin/uv
$(STAMP): pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade -c requirements/constraints.txt "pip>=24" uv
	$(UV) pip install --quiet --python $(PY) -c requirements/constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) -m firefly_orm.demo

LINT_PATHS := firefly_orm tests migrations docs/tooling docs_src scripts $(wildcard bench) $(wildcard examples)

MYPY_PATHS := firefly_orm tests docs/tooling docs_src scripts $(wildcard examples)

lint: ruff types

ruff: install
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

types: install
	$(VENV)/bin/mypy --strict $(MYPY_PATHS)

format: install
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

# The API reference (mkdocs.yml, docs/), warnings as errors, into site/.
docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Everything CI runs: lint, types, the whole suite (the docs site is built once,
# by tests/integration/test_docs.py), with the 20 slowest tests reported. ruff runs
# first (seconds); mypy runs beside the suite, which mostly waits on databases and
# processes, and its report follows the suite's. Either failing fails `make test`.
TYPES_LOG := $(VENV)/types.log
test: install ruff
	./scripts/ensure-test-servers.sh
	@$(MAKE) --no-print-directory types >$(TYPES_LOG) 2>&1 & types=$$!; \
	$(PY) -m pytest -q $(XDIST) --durations=20 $(PYTEST_ARGS); suite=$$?; \
	wait $$types; typed=$$?; \
	echo "== make types (ran beside the suite)"; cat $(TYPES_LOG); \
	[ $$typed -eq 0 ] || echo "make types failed (exit $$typed)"; \
	[ $$suite -eq 0 ] && [ $$typed -eq 0 ]

# tests/unit only: no database, no server process (seconds).
test-unit: install
	$(PY) -m pytest -q -n 2 tests/unit $(PYTEST_ARGS)

# The store contract and the memory layers on every backend (SQLite, PostgreSQL
# direct and through PgBouncer, MongoDB, files, memory): a few minutes.
test-fast: install
	./scripts/ensure-test-servers.sh
	$(PY) -m pytest -q $(XDIST) tests/contract tests/layers $(PYTEST_ARGS)

# The bench also installs the peers it compares with (the `bench` extra).
BENCH_STAMP := $(VENV)/.bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(UV) pip install --quiet --python $(PY) -c requirements/constraints.txt -e ".[$(EXTRAS),bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m bench

bench-quick: $(BENCH_STAMP)
	$(PY) -m bench --quick

migrate: install
	$(VENV)/bin/alembic upgrade head

clean:
	rm -rf $(VENV) dist build site .pytest_cache .mypy_cache .ruff_cache
