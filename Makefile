# make test / make demo do all the set-up on a fresh machine, then run.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo setup cross-tools clean bench-models

setup: $(STAMP) cross-tools

# The AArch64 tests (tests/onnx/test_native_cross.py) build with a cross compiler and run under
# qemu: installed here where make runs as root (as CI does); elsewhere those tests are skipped,
# saying how to install them.
CROSS_PACKAGES := qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross

cross-tools:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    ! { command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64 && \
	        [ -e /usr/aarch64-linux-gnu/lib/libc.a ]; } >/dev/null; then \
	  echo "installing $(CROSS_PACKAGES) (for the AArch64 tests)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CROSS_PACKAGES); } \
	    >/dev/null || echo "could not install $(CROSS_PACKAGES): the AArch64 tests will be skipped"; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: the CPU build on this machine's disk, never a CUDA build.
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

test: $(STAMP) cross-tools
	$(PY) -m pytest -n 2 --dist loadscope -q --durations=25 tests

demo: $(STAMP)
	$(PY) examples/demo.py

# What benchmarks/onnx_models.py needs beyond the light models, to export its torchvision and
# transformers models: torchvision --no-deps (its wheel's compiled ops are built for a CUDA torch;
# the model definitions need none of them), pillow (torchvision imports it) and transformers, with
# torch pinned to the build installed, so that no dependency can swap it for a CUDA build.
bench-models: $(STAMP)
	@torch="torch==$$($(PY) -c 'import torch; print(torch.__version__)')"; \
	echo "installing torchvision (--no-deps), pillow and transformers into $(VENV), keeping $$torch"; \
	$(PY) -m pip install --quiet --no-deps torchvision && \
	$(PY) -m pip install --quiet pillow transformers "$$torch"
	@$(PY) -c "import torch; assert torch.version.cuda is None, 'torch is now a CUDA build'"
	@echo "ready: $(PY) benchmarks/onnx_models.py (exports are built into build/bench-models/ on first use)"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
