# The two commands: `make run` (set up and start the service) and `make test` (set up and test).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: run test bench bytecode

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

# The checkout is installed editable. Where PYTHONDONTWRITEBYTECODE is set, Python never caches
# its compiled modules, and every command (and every one the tests start) compiles them again.
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q agent_core gateway adapters skills > /dev/null

run: bytecode
	$(VENV)/bin/ba-agent serve

test: bytecode
	$(VENV)/bin/ruff check agent_core gateway adapters skills tests bench
	$(VENV)/bin/mypy
	./scripts/ensure-postgres.sh
	$(PY) -m pytest -q --numprocesses auto --maxprocesses 4

bench: bytecode
	./scripts/ensure-postgres.sh
	$(PY) bench/startup.py
	$(PY) bench/turn.py
	$(PY) bench/tokens.py
	$(PY) bench/analytics.py
	$(PY) bench/anomaly.py
	$(PY) bench/ingest.py
	$(PY) bench/feedback.py
	$(PY) bench/schema_search.py
	$(PY) bench/pushdown.py
