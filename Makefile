# Two commands do all set-up on a fresh clone:
#   make demo   creates .venv, installs terascale, runs `terascale demo`
#   make test   creates .venv, installs terascale with every extra, runs the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned to the CPU build on local disk, so that `torch>=2.3` is already met.
TORCH_PIN := torch==2.13.0

.PHONY: demo test test-matrix test-little-data test-engines test-vw test-torch install install-test system-deps peers lint bench clean docs docs-check docs-snippets

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# setup.py builds the compiled core (src/terascale/_shm*.c, the links' record layer
# src/terascale/transport/_seclink.c on libcrypto and the vendored libaegis) in place:
# rebuilt when it changes.
CORE := setup.py src/terascale/_shmcore.c src/terascale/_shmdirect.c src/terascale/_shmsmall.c \
	src/terascale/_shmcore.h src/terascale/linear/_vw/_vwfast.c src/terascale/linear/_vw/_vwlearn.c \
	src/terascale/linear/_vw/_vwlearn.h src/terascale/transport/_seclink.c \
	src/terascale/transport/_ghash.c src/terascale/transport/_ghash.h \
	$(wildcard src/terascale/transport/_aegis/*/*.[ch])

$(VENV)/.installed: $(BIN)/python pyproject.toml $(CORE)
	$(BIN)/pip install -q -e ".[linear]"
	touch $@

$(VENV)/.installed-test: $(BIN)/python pyproject.toml $(CORE)
	$(BIN)/pip install -q "$(TORCH_PIN)"
	$(BIN)/pip install -q -e ".[test,linear,torch,spark,ray,dask,bench,docs]"
	touch $@

install: $(VENV)/.installed

install-test: system-deps $(VENV)/.installed-test

# Debian packages the suite needs: Fashion-MNIST (real data), Open MPI (the mpi4py peer),
# Java 17 (Spark), OpenSSL's headers (the links' record layer). Installed only when missing;
# needs root (as in CI).
system-deps:
	@bash scripts/system-deps.sh

demo: install
	$(BIN)/terascale demo

# The allreduce benchmark's PyPI peers (Intel MPI, MPICH, XGBoost's collective), each in its
# own environment under ~/.cache/terascale/peers: a no-op once there. The suite's peer tests
# skip without them, so CI installs them.
peers: install-test
	$(BIN)/python -c "from terascale.bench._peers import SIDE_PEERS, install_peer; \
	[install_peer(name) for name in SIDE_PEERS]"

# VW's own conformance tests (tests/vw_suite), each run live through pip vowpalwabbit and
# through `terascale vw`: the table of which reproduce VW; then held-out data shapes and
# daily flags side by side with VW (tests/linear/_vw_qa.py)
test-vw: install-test
	$(BIN)/python tests/vw_suite/_vwsuite.py
	$(BIN)/python tests/linear/_vw_qa.py
	TERASCALE_VW_SUITE=all $(BIN)/python -m pytest -q tests/linear/test_vw_dropin_rest.py \
	  tests/linear/test_vw_gaps.py tests/linear/test_vw_oaa.py tests/linear/test_vwonline.py \
	  tests/linear/test_vw_differential.py

# The engines' tests with the learner across separate executor JVMs (Spark local-cluster)
test-engines: install-test
	TERASCALE_SPARK_FULL=1 $(BIN)/python -m pytest -q tests/engines

# On a fresh clone numba compiles the linear kernels on first use (about 45 s of one core):
# that runs in the background while the lint and the docs build take the other core, so the
# suite finds them compiled; the peers' environments install beside them (mostly waiting on
# the package index). The suite runs on two pytest-xdist workers, a test file (and all of
# tests/engines) on one worker: most tests wait on processes, sockets and deadlines, and two
# at a time keep both cores busy. The slowest tests are listed at the end (the suite's
# time is watched).
test: install-test
	@TERASCALE_QUIET=1 $(BIN)/python -c "from terascale.linear.kernels import warm_kernels; warm_kernels(full=True)" & \
	warm=$$!; $(MAKE) peers & peers=$$!; rc=0; \
	{ $(BIN)/ruff check src tests examples && $(MAKE) docs; } || rc=$$?; \
	wait $$warm || rc=$$?; wait $$peers || rc=$$?; exit $$rc
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

# The documentation site (Sphinx, MyST pages, autodoc, sphinx-argparse) into docs/_build/html;
# any warning fails the build. The API pages are written by scripts/docs_api.py; its --check
# also fails on a public parameter or a flag without a description (--undocumented lists them).
docs: install-test
	$(BIN)/python scripts/docs_api.py --check
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The built site in headless Chromium: pages render, navigation and search are there.
docs-check: docs
	bash scripts/check_docs_render.sh

# Every code block of the docs and the README, the Spark, Ray and slow ones included
# (the suite runs the fast ones and says which it skipped).
docs-snippets: install-test
	TERASCALE_DOCS_FULL=1 $(BIN)/python -m pytest -q tests/test_docs_snippets.py

# The collective correctness matrix in full: every registered allreduce algorithm (and the
# one tests/collectives/_direct_allreduce.py registers) at world sizes 1-9; CI runs a subset.
test-matrix: install-test
	TERASCALE_MATRIX_FULL=1 $(BIN)/python -m pytest -q tests/collectives/test_matrix.py \
	  tests/collectives/test_register_algorithm.py tests/collectives/test_halving_doubling.py \
	  tests/test_fault_matrix.py

# Workers with little or no data of their own, in full: every flag combination of
# `terascale vw` on one and two lines for three workers (CI runs a quick subset).
test-little-data: install-test
	TERASCALE_LITTLE_DATA_FULL=1 $(BIN)/python -m pytest -q tests/linear/test_little_data.py

lint: install-test
	$(BIN)/ruff check src tests examples
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist docs/_build src/*.egg-info .pytest_cache .ruff_cache src/terascale/*.so

# The torch backend in full: the whole failure matrix (CI runs a subset of it), then
# PyTorch's own distributed test base (DistributedTest._DistTestBase) on gloo, on terascale and
# with gloo's groups created on terascale, at world sizes 2 and 3, and the comparison (every
# test that passes on gloo passes on terascale): about 20 minutes on a loaded 2-core machine
# (the ranks are forked from the driver). Each run writes its JSON after every test; the
# results of an earlier run are removed first (--resume continues a run stopped part-way).
# CI runs tests/torch/test_dist_suite.py, a fast subset.
DIST_SUITE := build/dist-suite
test-torch: install-test
	TERASCALE_TORCH_FULL=1 $(BIN)/python -m pytest -q tests/torch
	rm -rf $(DIST_SUITE) && mkdir -p $(DIST_SUITE)
	for ws in 2 3; do for setup in gloo terascale gloo-on-terascale; do \
	  nice -n 19 $(BIN)/python tests/torch/dist_suite.py --setup $$setup --world-size $$ws \
	    --resume --json $(DIST_SUITE)/$$setup-$$ws.json >> $(DIST_SUITE)/$$setup-$$ws.log 2>&1 || true; \
	done; done
	$(BIN)/python tests/torch/dist_suite.py --report $(DIST_SUITE)
