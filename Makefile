# The README's two commands are `make demo` and `make test`; both set up .venv first if needed.
# TORCH_CONSTRAINT pins the CPU torch wheel on CPU-only machines like CI; on a GPU machine run
# `make demo TORCH_CONSTRAINT=` to let pip pick the CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CONSTRAINT ?= ci/constraints-cpu.txt
PIP_C := $(if $(TORCH_CONSTRAINT),-c $(TORCH_CONSTRAINT),)
DEMO_DIR ?= demo
RUNS ?= runs
PORT ?= 8501

.PHONY: install demo demo-train app test test-fast clean-demo

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINT)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q $(PIP_C) -e ".[dev,e2e]"
	$(PY) -c "import torch,sys; sys.exit(f'CUDA torch {torch.__version__} on a CPU-only setup' if torch.version.cuda and '$(TORCH_CONSTRAINT)' else 0)"
	touch $@

install: $(VENV)/.installed

# Synthetic MIMIC-shaped data -> prepare (CAML rules) -> train LEAM on CPU -> open the app on it.
demo: demo-train app

demo-train: install
	test -f $(DEMO_DIR)/mimic/NOTEEVENTS.csv || $(PY) -m clinicode demo-data --out $(DEMO_DIR)/mimic --n-admissions 3000
	test -f $(RUNS)/demo/checkpoint/manifest.json || $(PY) -m clinicode train --mimic-dir $(DEMO_DIR)/mimic --out $(RUNS)/demo --epochs 10

app: install
	CLINICODE_RUNS=$(RUNS) $(VENV)/bin/streamlit run app_streamlit/main.py --server.port $(PORT) --server.address 127.0.0.1 --browser.gatherUsageStats false

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow and not e2e"

clean-demo:
	rm -rf $(DEMO_DIR) $(RUNS)/demo
