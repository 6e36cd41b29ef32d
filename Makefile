# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
# torch is installed first and pinned (CPU build from this machine kind's local wheel); everything
# else comes from constraints.txt, so CI installs exactly what was tested.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501
# The model cache stays inside the clone unless PDLAB_CACHE_DIR says otherwise, so a green run
# never leans on a model prepared earlier elsewhere on the machine.
export PDLAB_CACHE_DIR ?= $(CURDIR)/.cache
export HF_HUB_DISABLE_TELEMETRY := 1
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium

.PHONY: run test load-test setup prepare chromium lint unit bench app-bench lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q torch==2.13.0
	$(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt -e '.[test]'
	touch $@

setup: $(STAMP)

prepare: setup
	$(BIN)/python -m core prepare

chromium:
	@test -x $(CHROMIUM) || (apt-get update && apt-get install -y chromium)

run: prepare
	$(BIN)/python -m streamlit run app/streamlit_app.py --server.port=$(PORT)

lint: setup
	$(BIN)/ruff check .

test: prepare chromium lint
	$(BIN)/python -m pytest

load-test: prepare chromium  # the load tests alone (also part of make test): eight sessions, fifty cycles
	$(BIN)/python -m pytest tests/test_load.py

unit: setup
	$(BIN)/python -m pytest -m "not browser and not model"

bench: prepare
	$(BIN)/python -m core bench --json

app-bench: prepare chromium
	$(BIN)/python -m app.bench --json

lock: setup
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^torch==' | \
	  { echo "# Exact versions that make installs (tested together). Regenerate with: make lock"; \
	    echo "torch==2.13.0"; cat; } > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache artifacts
