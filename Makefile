# Everything a fresh machine needs: `make book` and `make test` create the environment first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export PYTHONPATH := $(CURDIR)
export PYTHONUNBUFFERED := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: env env-learner bytecode book test test-suite test-notebooks test-fast \
	test-gpu claims-full bench grading-report \
	notebooks release clean format

# Requirements by purpose (requirements/): learner.txt what the lessons, the exercises
# and the self-grade need (the course kit ships it); instructor.txt adds the shared
# gradebook's driver; requirements.txt adds building the book and testing.
# The venv, the requirements file $(1) installed in it, JupyterLab set up for a learner.
define install_env
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r $(1)
	$(BIN)/python tools/learner_lab.py
	touch $@
endef

# Everything (`make book`, `make test` and CI use this one).
env: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements/instructor.txt \
		requirements/learner.txt pyproject.toml tools/learner_lab.py
	$(call install_env,requirements.txt)

# A learner's environment from a copy of the repository: what the kit installs, no more.
env-learner: $(VENV)/.installed-learner

$(VENV)/.installed-learner: requirements/learner.txt pyproject.toml tools/learner_lab.py
	$(call install_env,requirements/learner.txt)

# The packages' bytecode, written once. Every grading kernel and notebook imports the
# check modules (about 21,000 lines); where PYTHONDONTWRITEBYTECODE is set, as on this
# project's machines, each one compiled them again, about 0.4 s per kernel. The grading
# sandbox reads these files and cannot write them. compileall writes whatever that
# variable says; Python compiles in memory any module whose source is newer.
bytecode: env
	$(BIN)/python -m compileall -q $(CURDIR)/tformer_ref $(CURDIR)/tformer_grading

book: bytecode
	$(BIN)/python tools/preexecute.py --threads 1
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	$(BIN)/python tools/kit.py
	@echo "Open _build/html/index.html"

# The suite in tests/ on two pytest-xdist workers (tests that share one built book or one graded class
# run on the same worker), and beside it nbval over every solution notebook. nbval runs in its own
# pytest: its cells are test items that must stay in one kernel, which xdist cannot promise. The
# book's own pages (lessons, capstone, ...) are not run by nbval here: the suite's book build
# (tests/book/test_book.py) executes every one of them and fails on any cell's error
# (nb_execution_raise_on_error), so nbval would only run them a second time. `make test-gpu`, which
# builds no book, runs nbval over the lessons too.
test: bytecode
	$(MAKE) --no-print-directory -j2 --output-sync=target test-suite test-notebooks

# The claims too slow to rerun small (the capstone's whole run, over five seeds; about four
# minutes on a CPU): tests/book/test_claims_ch06_training.py skips them unless asked.
claims-full: env
	TFORMER_FULL_CLAIMS=1 $(BIN)/python -m pytest -q tests/book/test_claims_ch06_training.py -k capstone

test-suite: env
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=25 tests

test-notebooks: env
	$(BIN)/python -m pytest --durations=10 solutions

# The quick part: the package, its checks and the notebook files, without executing notebooks.
test-fast: env
	$(BIN)/python -m pytest -m "not slow" tests

# On a GPU machine: the CUDA-only tests (fp16 + GradScaler, NCCL, flash/efficient SDPA), the package and
# check tests, and every lesson and solution notebook, all with the device forced to CUDA.
# Fails at once, saying why, where there is no CUDA GPU.
GPU_NOTEBOOKS = $(wildcard book/*/lesson.ipynb solutions/*/exercise.ipynb)
test-gpu: bytecode
	$(BIN)/python tools/require_gpu.py
	TFORMER_REQUIRE_GPU=1 TFORMER_DEVICE=cuda $(BIN)/python -m pytest -m "gpu or not slow" --durations=15 tests
	TFORMER_REQUIRE_GPU=1 TFORMER_DEVICE=cuda $(BIN)/python -m pytest --nbval-lax -p no:cacheprovider --durations=0 $(GPU_NOTEBOOKS)

bench: bytecode
	$(BIN)/python -m bench

# How the checks do on the measured bank (tests/exercises/**/bank_*.py): per exercise, wrong
# answers rejected, named, generic or misnamed, right answers accepted.
grading-report: env
	$(BIN)/python tools/grading_report.py

# Regenerate the diagrams, the .ipynb files from nbsrc/ and the student exercises from solutions/.
notebooks: env
	$(BIN)/python tools/figures.py
	$(BIN)/python tools/nbsync.py
	$(BIN)/python tools/release.py

# Format every Python file (the jupytext sources of the notebooks included) to the book's
# 88 columns; tests/suite/test_code_format.py checks that nothing is left to format.
format: env
	$(BIN)/ruff format .

release: env
	$(BIN)/python tools/release.py

clean:
	rm -rf _build release submitted autograded feedback gradebook.db
