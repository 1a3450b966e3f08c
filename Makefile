VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test format bench load clean

$(VENV)/installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

run: $(VENV)/installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py load_demo_help_center
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py close_stale_turns
	$(VENV)/bin/daphne -b $(HOST) -p $(PORT) kookee.asgi:application

test: $(VENV)/installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest

format: $(VENV)/installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) db.sqlite3 .pytest_cache

bench: $(VENV)/installed
	$(PY) bench/stop_latency.py
	$(PY) bench/admin.py

load: $(VENV)/installed
	$(PY) bench/load.py 200 3
