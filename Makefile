# On a fresh machine `make demo` and `make test` are all a newcomer needs:
# each creates .venv from plain python3 when it is missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test race soak lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/graph_replay.py

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy --strict src examples tests/typed

format: $(STAMP)
	$(BIN)/ruff check --fix src tests examples bench
	$(BIN)/ruff format src tests examples bench

test: lint
	$(BIN)/python -m pytest

# The whole suite under the race checker (any report fails a test: warnings are errors).
race: $(STAMP)
	AHIPGRAPH_RACE_CHECK=warn $(BIN)/python -m pytest -p no:cacheprovider

soak: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python bench/eager.py --json bench/results/eager.json
	$(BIN)/python bench/launch.py --json bench/results/launch.json
	$(BIN)/python bench/race.py --json bench/results/race.json

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
