# capsem: `make demo` and `make test` work on a fresh machine with only Python 3.11 and pip.
# uv (installed from PyPI into .tools/ when missing) builds .venv from the committed uv.lock.

SHELL := /bin/bash
PYTHON_VERSION ?= 3.11
UV := $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/.tools/bin/uv)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/.venv
RUN := $(UV) run --frozen --python $(PYTHON_VERSION)

.PHONY: install demo test lint format bench soak clean

$(CURDIR)/.tools/bin/uv:
	python3 -m venv $(CURDIR)/.tools
	$(CURDIR)/.tools/bin/pip install --quiet "uv==0.13.9"

.venv/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --frozen --python $(PYTHON_VERSION)
	@touch $@

install: .venv/.synced

demo: install
	$(RUN) capsem demo

test: install
	$(RUN) pytest -q

lint: install
	$(RUN) ruff check .
	$(RUN) ruff format --check .

format: install
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

bench: install
	$(RUN) python -m benchmarks

soak: install
	$(RUN) pytest -q -m soak

clean:
	rm -rf .venv .tools .pytest_cache .ruff_cache
