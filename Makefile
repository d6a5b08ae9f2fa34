# patchkit: every target sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PK := $(VENV)/bin/patchkit
MIRROR := build/sglang-mirror
FI_MIRROR := build/flashinfer-mirror
VLLM_MIRROR := build/vllm-mirror
DEMO := build/demo
DEMO_VERSION := 0.5.9

# The fixes' data in the form every command reads: patchkit/fixes/data.json and patchkit/fixes/modes/data.json,
# each its folder's TOML files, parsed (patchkit/fixes/build.py; a test holds them to the TOML files).
fix-data: $(VENV)/.deps
	$(PY) -m patchkit.fixes.build

# docs/FAILURE-MODES.md, generated from patchkit/fixes/modes/*.toml (a test holds it to the data).
failure-modes: fix-data install
	$(PY) -c "from patchkit.render.modes import atlas; open('docs/FAILURE-MODES.md', 'w').write('\\n'.join(atlas()) + '\\n')"

.PHONY: fix-data failure-modes test test-reliability fuzz demo venv install test-deps sglang-mirror flashinfer-mirror vllm-mirror patches check-patches check-kernels check-releases bench clean

# The virtualenv with what patchkit runs with (pyproject.toml's dependencies, nothing more);
# rebuilt when pyproject.toml changes.  It installs patchkit too, from this tree (.fresh tells
# the install step below that it is done already).  setuptools builds in build/lib and keeps
# what it copied there: a file deleted from patches/ would still ship.  Each build starts that
# folder afresh.  The virtualenv starts without pip and gets the newest from the system's pip
# (pip --python: a second faster than ensurepip and then an upgrade); ensurepip where that fails.
$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(PY) install --quiet --upgrade pip 2>/dev/null || \
		{ $(PY) -m ensurepip --quiet && $(PY) -m pip install --quiet --upgrade pip; }
	rm -rf build/lib build/bdist.*
	$(PY) -m pip install --quiet .
	touch $@ $(VENV)/.fresh

venv: $(VENV)/.deps

# The tests' tools (pyproject.toml's `test` extra: pytest, black, ruff, uv, build, ...) in the
# same virtualenv, for the targets that run tests only: make install leaves them out.  The
# extra's requirements alone, read from pyproject.toml (patchkit itself is make install's).
export TEST_EXTRA := import sys; toml = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli"); \
	print(*toml.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"], sep="\n")
$(VENV)/.test-deps: $(VENV)/.deps
	$(PY) -c "$$TEST_EXTRA" > $(VENV)/test-requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/test-requirements.txt
	touch $@

test-deps: install $(VENV)/.test-deps

# A real (non-editable) install, as a user gets it: shipped patches and templates included; redone
# when a file (or a folder: a file added or deleted) of the package changed since.
# (Absolute names: `patches` alone would be the target of that name below.)
SOURCES := $(shell find $(CURDIR)/patchkit $(CURDIR)/patches $(CURDIR)/templates -name __pycache__ -prune -o -print)
$(VENV)/.installed: $(VENV)/.deps $(SOURCES)
	if [ -e $(VENV)/.fresh ]; then rm $(VENV)/.fresh; else \
		rm -rf build/lib build/bdist.* && $(PY) -m pip install --quiet --no-deps --force-reinstall . ; fi
	touch $@

install: $(VENV)/.installed

# The tests write, fsync and delete many small files (checkouts, virtualenvs, state dirs): in a
# RAM file system when there is one (TEST_TMPDIR=/tmp to choose another).  Each run gets a folder
# of its own there (mktemp -d: a private name, safe in a shared 1777 folder; mode 755 so that the
# tests' other user reaches what they share with it): TMPDIR, pytest's --basetemp and the
# bytecode of the Python processes the tests start (PATCHKIT_TEST_PYCACHE: compiled once a run).
# A green run deletes it; a red one keeps it and prints where it is.
# They run in two processes per core, at most 8 (TEST_WORKERS=0: in this one), each test file in
# one process, the slowest files first (SLOW_FIRST in tests/support/session.py): a test often waits (pip,
# git, fsync, a real time-out).  More processes do the same work in more CPU time (on 2 cores, idle,
# docs/TESTING.md: 6 took 345 s of CPU and 164 s, 4 took 305 s and 156 s, 3 took 296 s and 155 s),
# but get more of a busy machine (beside three busy loops, 4 processes get 4/7 of it, 3 only 1/2).
# make test prints the 20 slowest (docs/TESTING.md).
TEST_TMPDIR ?= $(firstword $(wildcard /dev/shm) $(TMPDIR) /tmp)
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(8, 2 * len(os.sched_getaffinity(0))))' 2>/dev/null || echo 2)
# The plugins are named (-p), not found by their entry points: pytest rewrites the asserts of every module
# of a distribution that registers one (all of hypothesis, platformdirs), in each process, where it may not
# write bytecode (PYTHONDONTWRITEBYTECODE, as CI sets it): a second per process.
PYTEST := PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(VENV)/bin/pytest -p xdist.plugin -p _hypothesis_pytestplugin \
	-q -p no:cacheprovider -o tmp_path_retention_policy=failed -n $(TEST_WORKERS) --dist loadfile \
	--no-loadscope-reorder
# $(call in_run_folder,COMMAND): COMMAND (a pytest) with the run's folder.
in_run_folder = run=$$(mktemp -d "$(TEST_TMPDIR)/patchkit-tests.XXXXXX") && chmod 755 "$$run" && \
	if TMPDIR="$$run" PATCHKIT_TEST_PYCACHE="$$run/pycache" $(1) --basetemp="$$run/pytest"; then rm -rf "$$run"; \
	else rc=$$?; echo "the run's files are kept in $$run"; exit $$rc; fi

# mypy checks patchkit/ while the tests start (their first seconds wait on pip and git more than on
# the cores); its report is printed, and its verdict counts, once the tests are done.
test: test-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy > $(VENV)/mypy.out 2>&1 & checker=$$!; \
	$(call in_run_folder,$(PYTEST) --durations=20); \
	wait $$checker; rc=$$?; cat $(VENV)/mypy.out; exit $$rc

# The reliability suite at full size: a few hundred SIGKILLs of apply, revert and upstream,
# races, hostile and broken input, and the rewriter's properties at their full count of examples
# (make test runs a sample of each). See docs/RELIABILITY.md.
test-reliability: test-deps
	$(call in_run_folder,PATCHKIT_KILLS=400 $(PYTEST) tests/reliability tests/test_rewriter_properties.py)

# The patch reader under atheris (libFuzzer): any bytes give a patch or a clean error.
FUZZ_RUNS ?= 300000
fuzz: install
	$(PY) -m pip install --quiet atheris
	mkdir -p build/fuzz/corpus
	$(PY) fuzz/fuzz_patchread.py -atheris_runs=$(FUZZ_RUNS) -artifact_prefix=build/fuzz/ build/fuzz/corpus

# A local git history of real SGLang releases, one commit and tag per PyPI wheel.
sglang-mirror: install
	PYTHONPATH=tests $(PY) -m support.mirror --dest $(MIRROR)

# The same for FlashInfer (0.5.0 .. 0.7.4), from the PyPI flashinfer-python wheels.
flashinfer-mirror: install
	PYTHONPATH=tests $(PY) -m support.mirror --project flashinfer --dest $(FI_MIRROR)

# The same for vLLM (0.10.2 .. 0.33.0, the releases with the tables), from PyPI's source archives.
vllm-mirror: install
	PYTHONPATH=tests $(PY) -m support.mirror --project vllm --dest $(VLLM_MIRROR)

# Regenerate the shipped patch series from the mirrors (never edit them by hand).
patches: sglang-mirror flashinfer-mirror vllm-mirror
	$(PK) generate --repo $(MIRROR) --out patches
	$(PK) generate --project flashinfer --repo $(FI_MIRROR) --out patches/flashinfer
	$(PK) generate --project vllm --repo $(VLLM_MIRROR) --out patches/vllm

# Every shipped series (SGLang's, FlashInfer's and vLLM's) is what generate writes, applies at its
# tag in order (patch -p1, git apply, git am), compiles, keeps black happy, gives key 12
# the value of key 10 ("12.0" that of "10.0" for vLLM), opens the fusion gate, and gives
# FlashInfer upstream 0.6.17's list.
check-patches: test-deps sglang-mirror flashinfer-mirror vllm-mirror
	$(PK) generate --repo $(MIRROR) --out patches --check
	$(PK) generate --project flashinfer --repo $(FI_MIRROR) --out patches/flashinfer --check
	$(PK) generate --project vllm --repo $(VLLM_MIRROR) --out patches/vllm --check
	PATCHKIT_REAL_MIRROR=$(abspath $(MIRROR)) PATCHKIT_REAL_FLASHINFER_MIRROR=$(abspath $(FI_MIRROR)) \
		PATCHKIT_REAL_VLLM_MIRROR=$(abspath $(VLLM_MIRROR)) \
		$(VENV)/bin/pytest -q -p no:cacheprovider tests/test_real_releases.py tests/test_vllm_releases.py

# The fat binary reader and doctor/diagnose on the whole real sglang-kernel 0.4.10 wheel (1.2 GB of
# .so files, installed by pip; fetched once and cached): every .so against cuobjdump, doctor on 8 RTX
# PRO 6000 and on a GB10, diagnose of a missing kernel image; and the CUDA wheels people install (nvidia-cufft,
# nvidia-nccl-cu13, cupy-cuda13x, vllm 0.20.2, triton 3.5.1 and 3.6.0: check_wheels.py), each .so against
# cuobjdump entry by entry.  make test keeps the fixtures, small copies of some of these files and one .so.
check-kernels: test-deps
	$(call in_run_folder,$(PYTEST) tests/kernels/check_wheel.py tests/kernels/check_installed.py tests/kernels/check_wheels.py)

# Whether the failure modes' data (patchkit/fixes/modes/*.toml) reaches the newest releases on the package
# index pip is configured with: each bound read to an older release, and whether the newest release still
# holds each fix's text (parts of its wheel read, kept in ~/.cache/patchkit/members).  Not part of make test;
# exit 0 whatever it lists, 2 when the index cannot be read (docs/RELEASES.md).
check-releases: install
	PYTHONPATH=tests $(PY) -m support.check_releases

# Speed and memory, side by side with their floors (see benchmarks/bench.py); prints a table.
# BENCH_ARGS="--only commands" runs a part of it.
BENCH_ARGS ?=
bench: sglang-mirror flashinfer-mirror vllm-mirror
	$(PY) benchmarks/bench.py --mirror $(MIRROR) --flashinfer-mirror $(FI_MIRROR) --vllm-mirror $(VLLM_MIRROR) --patchkit $(PK) --version $(DEMO_VERSION) $(BENCH_ARGS)

# The main job on a real release: fetch SGLang $(DEMO_VERSION) from PyPI into a scratch
# git checkout (with bytecode, as a used checkout has), then apply, verify, status, revert,
# and prepare the upstream branch, mbox and PR description.
# $(call expect,CODE,COMMAND): run COMMAND, which must exit with CODE (a step that shows a failure: the
# recipe goes on after exactly that failure, and stops on any other exit, a success included).
expect = $(2); rc=$$?; [ $$rc -eq $(1) ] || { echo "expected exit $(1), got $$rc: $(2)" >&2; exit 1; }

demo: install
	rm -rf $(DEMO)
	PYTHONPATH=tests $(PY) -m support.mirror --dest $(DEMO)/sglang --versions $(DEMO_VERSION)
	$(PY) -m compileall -q $(DEMO)/sglang/python/sglang/srt/distributed
	@echo
	@echo "== the shipped patch is exactly what patchkit generates from v$(DEMO_VERSION)"
	$(PK) generate --repo $(DEMO)/sglang --tag v$(DEMO_VERSION) --out patches --check
	@echo
	@echo "== before: verify fails (exit 1 expected)"
	$(call expect,1,$(PK) verify $(DEMO)/sglang)
	@echo
	@echo "== apply the shipped patch"
	$(PK) apply $(DEMO)/sglang --no-generate
	git -C $(DEMO)/sglang --no-pager diff
	@echo
	@echo "== verify, apply again (nothing to do), status"
	$(PK) verify $(DEMO)/sglang
	$(PK) apply $(DEMO)/sglang
	$(PK) status $(DEMO)/sglang
	@echo
	@echo "== revert: the release's exact bytes are back"
	$(PK) revert $(DEMO)/sglang
	git -C $(DEMO)/sglang --no-pager diff --exit-code --stat
	@echo
	@echo "== upstream: a branch with one commit per fix (DeepGEMM's, the tables'), an mbox each and PR.md (scratch identity for the demo)"
	git -C $(DEMO)/sglang config user.name "patchkit demo"
	git -C $(DEMO)/sglang config user.email demo@patchkit.invalid
	$(PK) upstream $(DEMO)/sglang --out $(DEMO)/upstream
	git -C $(DEMO)/sglang --no-pager log --stat -2 patchkit/sm120-deepgemm-sm12x-torch-symm-mem
	@echo "demo done: $(DEMO)/sglang is v$(DEMO_VERSION) again; the fixes wait on branch patchkit/sm120-deepgemm-sm12x-torch-symm-mem"

clean:
	rm -rf build $(VENV) *.egg-info
