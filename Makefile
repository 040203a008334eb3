# The two commands a new user needs: `make test` and `make demo`.
# Each creates the virtual environment on first use and installs everything itself,
# so a fresh clone on a machine with only python3 works.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,openai-agents]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/agent-adapter demo

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check agent_adapter tests benchmarks
	$(BIN)/mypy agent_adapter

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
