# capsem: `make demo` and `make test` work on a fresh machine with only Python 3.11 and pip.
# uv (installed from PyPI into .tools/ when missing) builds .venv from the committed uv.lock;
# `make test` also installs the Debian packages the tests need (chromium, postgresql) when they are missing.

SHELL := /bin/bash
PYTHON_VERSION ?= 3.11
UV := $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/.tools/bin/uv)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/.venv
# Compiled bytecode in the venv, and written for the project's own modules: every mitmdump,
# recorder and CLI process the tests start would otherwise recompile mitmproxy (~1.5 s each).
export UV_COMPILE_BYTECODE := 1
unexport PYTHONDONTWRITEBYTECODE
RUN := $(UV) run --frozen --python $(PYTHON_VERSION)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: install install-cli system-deps test-backends test-agents demo test lint format docs bench soak clean

$(CURDIR)/.tools/bin/uv:
	python3 -m venv $(CURDIR)/.tools
	$(CURDIR)/.tools/bin/pip install --quiet "uv==0.13.9"

.venv/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --frozen --python $(PYTHON_VERSION)
	@touch $@

# The compiled fast path (capsem/native/*.c, a few seconds): built when a C compiler and
# the Python headers are there; without them capsem runs on pure Python (`capsem doctor` says so).
install: .venv/.synced
	@.venv/bin/python -m capsem.native.build

# Headless Chromium for the browser tests (bundle and pages), from Debian's packages, with fonts
# for the screenshots they keep (emoji in prompts and tool results included); PostgreSQL's server
# for the team tests and benchmarks (each starts a throw-away cluster: capsem/team/cluster.py).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends \
	    chromium fonts-dejavu-core fonts-noto-color-emoji; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends postgresql; }

# Arize Phoenix, the real OpenTelemetry backend the OTLP export tests start (offline, SQLite), in an
# environment of its own (never the project's .venv): installed from PyPI once, when missing.
PHOENIX_VERSION := 20.26.1
PHOENIX := $(CURDIR)/.tools/phoenix
test-backends: $(PHOENIX)/.installed

$(PHOENIX)/.installed: | $(UV)
	$(UV) venv -q --python $(PYTHON_VERSION) $(PHOENIX)
	$(UV) pip install -q --compile-bytecode --python $(PHOENIX)/bin/python "arize-phoenix==$(PHOENIX_VERSION)"
	@touch $@

# The real agent CLIs the end-to-end tests run under `capsem run --emulator` (tests/e2e/
# test_real_agents.py), from npm into .tools/agents (never a global install), once; without npm the
# tests skip and say why.
AGENT_CLIS := @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @google/gemini-cli@0.61.0
AGENTS_DIR := $(CURDIR)/.tools/agents
test-agents:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "npm not found: the real-agent tests will skip (install Node.js 20+ and npm to run them)"; \
	elif ! grep -qxF "$(AGENT_CLIS)" $(AGENTS_DIR)/.installed 2>/dev/null; then \
	  mkdir -p $(AGENTS_DIR) && \
	  { npm install --prefix $(AGENTS_DIR) --no-audit --no-fund --loglevel=error $(AGENT_CLIS) && \
	    echo "$(AGENT_CLIS)" > $(AGENTS_DIR)/.installed; } || \
	  echo "npm install failed: the real-agent tests will skip"; \
	fi

# `capsem` on your PATH: a link to .venv/bin/capsem in BIN_DIR: the per-user bin directory that
# uv tool and pipx use (~/.local/bin, or ~/bin) when it is on PATH, else /usr/local/bin when you
# may write there, else ~/.local/bin with the line to add to your shell's rc file.
ON_PATH = $(findstring :$(1):,:$(PATH):)
BIN_DIR ?= $(or $(if $(call ON_PATH,$(HOME)/.local/bin),$(HOME)/.local/bin),$(if $(call ON_PATH,$(HOME)/bin),$(HOME)/bin),$(if $(shell test -w /usr/local/bin && echo y),/usr/local/bin),$(HOME)/.local/bin)
install-cli: install
	@mkdir -p "$(BIN_DIR)" && ln -sf "$(CURDIR)/.venv/bin/capsem" "$(BIN_DIR)/capsem"
	@case ":$$PATH:" in \
	  *":$(BIN_DIR):"*) echo "capsem: $(BIN_DIR)/capsem (on your PATH)";; \
	  *) echo "capsem: linked $(BIN_DIR)/capsem; $(BIN_DIR) is not on your PATH: add it with"; \
	     echo "  echo 'export PATH=\"$(BIN_DIR):\$$PATH\"' >> ~/.bashrc   (or run $(CURDIR)/.venv/bin/capsem)";; \
	esac

# Run without `uv run`, which would put .venv/bin on PATH: the commands the demo suggests are
# then spelled as they work in a new shell of yours (`capsem` once it is on PATH).
demo: install-cli
	.venv/bin/capsem demo

# In-process tests on both cores (pytest-xdist; an idle worker takes tests queued for the other, so
# that a long one queued last does not leave a core idle at the end); then the end-to-end tests
# (each file starts its own mitmdump, emulator, Chromium on free ports) and the reliability suite
# on both cores, a file at a time to a free worker (a module's shared mitmdump or recording starts
# once; tests/diff and tests/team each whole, for their session fixtures: tests/conftest.py), the
# slowest directories first so that short files fill both cores at the end; then the reliability
# tests marked `serial` (timings a second busy core could break: kill -9 a second after flows end),
# alone.
IN_PROCESS_TESTS := tests/providers tests/addons tests/core tests/emulator tests/test_imports.py \
	tests/test_layout.py tests/test_capsem_check_session.py
SLOW_TESTS := tests/e2e tests/team tests/diff tests/cli tests/replay tests/reliability tests/view tests/bundle
OTHER_TESTS := $(filter-out $(SLOW_TESTS) $(IN_PROCESS_TESTS),$(patsubst %/,%,$(dir $(wildcard tests/*/__init__.py))) $(wildcard tests/test_*.py))

test: install system-deps test-backends test-agents
	$(RUN) pytest -q -n 2 --dist worksteal $(IN_PROCESS_TESTS)
	$(RUN) pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not serial" $(SLOW_TESTS) $(OTHER_TESTS)
	$(RUN) pytest -q -m serial tests/reliability

lint: install
	$(RUN) ruff check .
	$(RUN) ruff format --check .

format: install
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

# The command reference (docs/cli.md) from every command's --help; tests/cli/test_docs.py checks it.
docs: install
	$(RUN) cog -r docs/cli.md

bench: install
	$(RUN) python -m benchmarks

soak: install
	$(RUN) pytest -q -m soak

clean:
	rm -rf .venv .tools .pytest_cache .ruff_cache
