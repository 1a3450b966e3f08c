VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# daphne by default; `make run SERVER=uvicorn` for the cheaper option (docs/benchmarks.md).
# No access log from either: its lines carry query strings (a visitor's
# search on /help/?q=...), and logs carry no visitor's words.
SERVER ?= daphne
SERVE_daphne = $(VENV)/bin/daphne -b $(HOST) -p $(PORT) --access-log /dev/null kookee.asgi:application
SERVE_uvicorn = $(VENV)/bin/uvicorn --host $(HOST) --port $(PORT) --lifespan on --no-access-log kookee.asgi:application

.PHONY: run superuser test format bench load eval eval-manuals clean chromium screenshots messages compilemessages gettext

$(VENV)/installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

# Local use: DEBUG on (the settings make a local secret in .secret_key).
# Production never runs this: see docs/operations.md.
run: export DJANGO_DEBUG ?= true
run: $(VENV)/installed compilemessages
	$(PY) manage.py migrate --noinput
	$(PY) manage.py load_demo_help_center
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py close_stale_turns
	$(PY) manage.py purge_expired
	$(SERVE_$(SERVER))

superuser: export DJANGO_DEBUG ?= true
superuser: $(VENV)/installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py createsuperuser

test: $(VENV)/installed chromium compilemessages
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DJANGO_DEBUG=true $(VENV)/bin/mypy
	$(VENV)/bin/pytest

# Debian's Chromium for the browser tests (Playwright's own browser download
# cannot work offline). Installed when missing, if this user may (root with
# apt-get); otherwise the browser tests skip, except under CI=true.
chromium:
	@test -x /usr/bin/chromium || { test "$$(id -u)" = 0 && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; }; } || \
	  echo "note: no /usr/bin/chromium (apt-get install chromium): the browser tests will be skipped"

# Translations (locale/): `make messages` finds the strings to translate in
# the code, templates and scripts, and adds the new ones to the .po files
# (tests/test_translations.py fails while one has no translation);
# `compilemessages` builds the .mo files that Django reads. Both .po and .mo
# are committed, so that `make run` needs no gettext; run and test rebuild
# the .mo when gettext is there (the test checks they match their .po).
MAKEMESSAGES = $(PY) manage.py makemessages -l pt_BR --add-location=file --no-obsolete \
	-i .venv -i staticfiles -i bench -i tests -i docs -i locale
messages: export DJANGO_DEBUG ?= true
messages: $(VENV)/installed gettext
	@command -v msgfmt >/dev/null || { echo "make messages needs GNU gettext (apt-get install gettext)"; exit 1; }
	$(MAKEMESSAGES) -d django
	$(MAKEMESSAGES) -d djangojs
	$(MAKE) compilemessages

compilemessages: export DJANGO_DEBUG ?= true
compilemessages: $(VENV)/installed gettext
	@if command -v msgfmt >/dev/null; then \
	  $(PY) manage.py compilemessages -l pt_BR -i .venv -i staticfiles -i bench -v0; \
	else echo "note: no GNU gettext (msgfmt): using the committed translations"; fi

# GNU gettext (msgfmt, xgettext), which Django's message commands run:
# installed from Debian's packages when missing and this user may.
gettext:
	@command -v msgfmt >/dev/null || { test "$$(id -u)" = 0 && command -v apt-get >/dev/null && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gettext >/dev/null; }; }; } || \
	  echo "note: no GNU gettext (apt-get install gettext): the translation tests will fail"

# The README's screenshots, from the browser tests' own scenes.
screenshots: $(VENV)/installed chromium compilemessages
	KOOKEE_SCREENSHOTS_DIR=docs/screenshots $(VENV)/bin/pytest -q tests/e2e/test_screenshots.py tests/e2e/test_admin_pages.py

format: $(VENV)/installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) db.sqlite3 .pytest_cache .secret_key

# Benches and the load test serve the app as `make run` does (DEBUG on, a local
# secret); the performance benches (bench/harness.py) serve it as production
# does, and write docs/benchmarks.md. About 40 minutes; Node.js runs the load.
bench load: export DJANGO_DEBUG ?= true
bench: $(VENV)/installed $(VENV)/bench-installed chromium
	$(PY) bench/probe_vs_stream.py
	$(PY) bench/relay_overhead.py
	$(PY) bench/stop_latency.py
	$(PY) bench/concurrency.py
	$(PY) bench/per_character.py
	$(PY) bench/floor.py
	$(PY) bench/db_writes.py
	$(PY) bench/soak.py --visitors 200 $$(pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null && echo --postgres)
	$(PY) bench/eval.py --split test --save
	$(PY) bench/manuals.py --split test --save
	$(PY) bench/embedding_speed.py --save
	$(PY) bench/search_scale.py
	$(PY) bench/import_scale.py
	$(PY) bench/hostile_sources.py
	$(PY) bench/report.py
	$(PY) bench/admin.py
	$(PY) bench/limits.py
	$(PY) bench/render.py

$(VENV)/bench-installed: $(VENV)/installed bench/requirements.txt
	$(PY) -m pip install --quiet -r bench/requirements.txt
	touch $@

# Help-center search on questions it was not built on: the demo help center
# (bench/eval.py), then real manuals from Debian's packages (bench/manuals.py:
# apt-get downloads them once into .cache/; a first import with default
# settings embeds for minutes, an hour for a large manual; reused after).
# The test half by default; `make eval SPLIT=tune` for the half that tunes,
# `make eval-manuals MANUALS=gimp,debian-faq` for some manuals only;
# CONFIGS=default,rerank with a reranker's KOOKEE_RERANK_* in the shell.
SPLIT ?= test
MANUALS ?=
CONFIGS ?=
eval eval-manuals: export DJANGO_DEBUG ?= true
eval: $(VENV)/installed
	$(PY) bench/eval.py --split $(SPLIT)
	$(MAKE) --no-print-directory eval-manuals
eval-manuals: $(VENV)/installed
	$(PY) bench/manuals.py --split $(SPLIT) $(if $(MANUALS),--manuals $(MANUALS)) $(if $(CONFIGS),--configs $(CONFIGS))

# Every turn's invariants under load: one process on SQLite, then two on
# PostgreSQL and Redis when this machine runs them.
load: $(VENV)/installed
	$(PY) bench/load.py 200 3
	@if command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; then \
	  $(PY) bench/load.py 200 3 --postgres --processes 2; \
	else echo "note: no PostgreSQL on 127.0.0.1:5432: the two-process run is skipped"; fi
