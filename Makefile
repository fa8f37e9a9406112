# Keel: `make demo` shows the simulated cluster, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-debian bench chaos schema clean ui deb test-package extjs

$(STAMP): requirements-dev.txt setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# ExtJS (GPL) and Font Awesome for the web UI harness, as www/package-lock.json pins them:
# a test and demo dependency, never shipped.  tools/fetch-npm takes the npm registry's
# tarballs and checks their integrity hashes; no node or npm needed (`npm ci` in www/
# installs the same files).
EXTJS := www/node_modules/extjs-gpl/build/ext-all.js

$(EXTJS): www/package.json www/package-lock.json | $(STAMP)
	$(PY) tools/fetch-npm www
	touch $@

extjs: $(EXTJS)

# The command-line story always runs; without ExtJS (no network, say) the demo says what
# is missing and keeps the simulator running.  DEMO_ARGS="--port 9443": keel-web's port.
demo: $(STAMP) ui
	@$(PY) tools/fetch-npm www || true
	$(VENV)/bin/keel demo --harness www $(DEMO_ARGS)

# The whole suite: 10-20 minutes on 2 cores (docs/development.md).
test: $(STAMP) $(EXTJS) ui
	$(PY) -m pytest -q

# The same suite on Debian's own python3 and packages (python3-proxmoxer, python3-flask, ...),
# as the .deb runs; .ci/run installs them.  Debian's urllib3 1.26 warns when the garbage
# collector closes a kept-alive socket; that warning is not a failure there.
test-debian:
	PYTHONPATH=$(CURDIR)/backend /usr/bin/python3 -m pytest -q -p no:cacheprovider \
	    -W "ignore::pytest.PytestUnraisableExceptionWarning" tests/unit tests/integration tests/security

# Every part runs even if one misses a target; any miss fails the target.
bench: $(STAMP) $(EXTJS) ui
	@status=0; \
	$(PY) tests/bench/run.py || status=1; \
	$(PY) tests/bench/planner.py || status=1; \
	$(PY) tests/bench/web.py || status=1; \
	$(PY) tests/bench/web_slow.py || status=1; \
	$(PY) tests/bench/streaming.py || status=1; \
	$(PY) tests/bench/runners.py || status=1; \
	$(PY) tests/bench/ui_cost.py || status=1; \
	exit $$status

# The leadership chaos test, longer than make test's 20 trials: KEEL_CHAOS_TRIALS (200) trials
# from KEEL_CHAOS_SEED (a new one each run unless given; printed, to run a failure again).
chaos: $(STAMP)
	@seed=$${KEEL_CHAOS_SEED:-$$(date +%s)}; echo "chaos: seed $$seed, $${KEEL_CHAOS_TRIALS:-200} trials"; \
	KEEL_CHAOS_SEED=$$seed KEEL_CHAOS_TRIALS=$${KEEL_CHAOS_TRIALS:-200} \
	    $(PY) -m pytest -q tests/integration/test_chaos.py

# The web UI plugin: one flat file, like pve-manager's pvemanagerlib.js, built from
# pve-ui/src/*.js in name order.
UI_JS  := $(sort $(wildcard pve-ui/src/*.js))
UI_CSS := $(wildcard pve-ui/keel.css)

ui: build/pve-ui/keel.js

build/pve-ui/keel.js: $(UI_JS) $(UI_CSS)
	mkdir -p build/pve-ui
	cat $(UI_JS) > $@.tmp && mv $@.tmp $@
	$(if $(UI_CSS),cp $(UI_CSS) build/pve-ui/keel.css)

# The Debian package, dist/pve-keel_<version>_all.deb (version from debian/changelog),
# built from a copy of the sources in build/deb/ with Debian's own python3 (no venv, no
# pyenv on PATH), then checked by lintian: errors and warnings fail (docs/packaging.md).
DEB_SOURCES := backend pve-ui debian docs README.md LICENSE Makefile setup.cfg pyproject.toml
DEB_PATH    := /usr/sbin:/usr/bin:/sbin:/bin

deb:
	rm -rf build/deb && mkdir -p build/deb/pve-keel dist
	tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=build $(DEB_SOURCES) \
	    | tar -x -C build/deb/pve-keel
	cd build/deb/pve-keel && env -u PYTHONPATH -u VIRTUAL_ENV PATH=$(DEB_PATH) \
	    dpkg-buildpackage -b -us -uc --no-sign
	env PATH=$(DEB_PATH) lintian --fail-on error,warning --info build/deb/pve-keel_*.changes
	rm -f dist/pve-keel_*_all.deb && cp build/deb/pve-keel_*_all.deb dist/
	@ls -l dist/pve-keel_*_all.deb

# Builds the package, then installs, upgrades, removes and purges it on this machine
# (root, Debian 12 or 13): tests/package/, not part of `make test`.
test-package: deb
	env -u PYTHONPATH -u VIRTUAL_ENV PATH=$(DEB_PATH) /usr/bin/python3 -m pytest -p no:cacheprovider \
	    -o addopts="-ra --strict-markers" -W "ignore::pytest.PytestUnraisableExceptionWarning" --confcutdir=tests/package -v -s tests/package

schema:
	tools/trim-pve-schema

clean:
	rm -rf $(VENV) build dist backend/*.egg-info .pytest_cache
