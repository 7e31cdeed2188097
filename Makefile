# The two commands: `make run` (set up and start the service) and `make test` (set up and test).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: run test bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/ba-agent serve

test: $(VENV)/.installed
	$(VENV)/bin/ruff check agent_core gateway adapters skills tests bench
	$(VENV)/bin/mypy
	./scripts/ensure-postgres.sh
	$(PY) -m pytest -q

bench: $(VENV)/.installed
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
