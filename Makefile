# Everything a fresh machine needs: `make book` and `make test` create the environment first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export PYTHONPATH := $(CURDIR)
export PYTHONUNBUFFERED := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: env book test test-fast bench notebooks release clean

env: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

book: env
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "Open _build/html/index.html"

test: env
	$(BIN)/python -m pytest

# The quick part: the package, its checks and the notebook files, without executing notebooks.
test-fast: env
	$(BIN)/python -m pytest -m "not slow" tests

bench: env
	$(BIN)/python -m bench

# Regenerate the .ipynb files from nbsrc/ and the student exercises from solutions/.
notebooks: env
	$(BIN)/python tools/nbsync.py
	$(BIN)/python tools/release.py

release: env
	$(BIN)/python tools/release.py

clean:
	rm -rf _build release submitted autograded feedback gradebook.db
