# Keel: `make demo` shows the simulated cluster, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-debian bench chaos schema clean ui deb deb-build deb-lint test-package extjs \
        test-package-deb test-package-13 test-debian-13 deb-clean-12 deb-clean-13

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

# The whole suite: about 35 minutes on 2 cores (docs/development.md).
test: $(STAMP) $(EXTJS) ui
	$(PY) -m pytest -q

# The same suite on Debian's own python3 and packages (python3-proxmoxer, python3-flask, ...),
# as the .deb runs; .ci/run installs them.  Warnings are errors as in `make test`, Keel's
# ResourceWarnings too; the one exception, with urllib3 1.x only (Debian 12's 1.26), is in
# tests/conftest.py: the TLS sockets a garbage-collected connection pool leaves unclosed.
# The leadership chaos test runs one trial of each fault here (its 20 run in `make test`,
# 200 in `make chaos`): what it hunts, two acting leaders, does not hang on the libraries'
# versions, and CI runs this target twice (Debian 12, and Debian 13 in a chroot).  For the
# same reason the planner's property tests draw a fifth of their examples here.
# `make test-debian DEBIAN_QUICK=1` (Debian 13's chroot run) leaves out the slowest timing
# tests (power saving's engine tests, chaos, fencing: 10 of CI's minutes), which run in the
# two other runs; what they hang on of the libraries the rest of the suite covers.
QUICK_SKIP := integration and (test_chaos or test_fencing or test_power_cli or test_power_engine or \
              test_power_handover or test_power_maintenance or test_power_runners or test_power_sleep or \
              test_power_test or test_power_wake)
test-debian:
	KEEL_CHAOS_TRIALS=$${KEEL_CHAOS_TRIALS:-4} KEEL_SAFETY_EXAMPLES=$${KEEL_SAFETY_EXAMPLES:-0.2} \
	PYTHONPATH=$(CURDIR)/backend /usr/bin/python3 -m pytest -q -p no:cacheprovider \
	    $(if $(DEBIAN_QUICK),-k "not ($(QUICK_SKIP))") tests/unit tests/integration tests/security

# ProxLB 2.3.0 from PyPI in a venv of its own, for the bench's side-by-side run only (it is
# GPL-3.0 and never imported: tests/bench/versus_proxlb.py runs it as a process). Without
# network the install fails, and the bench says so and runs the rest.
PROXLB_VENV  := build/proxlb-venv
PROXLB_STAMP := $(PROXLB_VENV)/.proxlb-2.3.0

$(PROXLB_STAMP):
	$(PYTHON) -m venv $(PROXLB_VENV)
	$(PROXLB_VENV)/bin/python -m pip install --quiet proxlb==2.3.0
	touch $@

# Every part runs even if one misses a target; any miss fails the target.
bench: $(STAMP) $(EXTJS) ui
	@status=0; \
	$(MAKE) --no-print-directory $(PROXLB_STAMP) || echo "ProxLB 2.3.0 could not be installed from PyPI: the bench runs without it"; \
	$(PY) tests/bench/run.py || status=1; \
	$(PY) tests/bench/planner.py || status=1; \
	$(PY) tests/bench/versus_proxlb.py || status=1; \
	$(PY) tests/bench/web.py || status=1; \
	$(PY) tests/bench/web_slow.py || status=1; \
	$(PY) tests/bench/streaming.py || status=1; \
	$(PY) tests/bench/runners.py || status=1; \
	$(PY) tests/bench/runners_load.py || status=1; \
	$(PY) tests/bench/ui_cost.py || status=1; \
	$(PY) tests/bench/power_week.py || status=1; \
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

# deb-build needs only build-essential and the Build-Depends (a clean chroot: deb-clean-12,
# deb-clean-13); deb-lint needs lintian.
deb: deb-build deb-lint

deb-build:
	rm -rf build/deb && mkdir -p build/deb/pve-keel dist
	tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=build $(DEB_SOURCES) \
	    | tar -x -C build/deb/pve-keel
	cd build/deb/pve-keel && env -u PYTHONPATH -u VIRTUAL_ENV PATH=$(DEB_PATH) \
	    dpkg-buildpackage -b -us -uc --no-sign
	rm -f dist/pve-keel_*_all.deb && cp build/deb/pve-keel_*_all.deb dist/
	@ls -l dist/pve-keel_*_all.deb

deb-lint:
	env PATH=$(DEB_PATH) lintian --fail-on error,warning --info build/deb/pve-keel_*.changes

# Builds the package, then installs, upgrades, removes and purges it on this machine
# (root, Debian 12 or 13): tests/package/, not part of `make test`.  test-package-deb tests
# the .deb already in dist/ (the chroot below gives it the one Debian 12 built).
test-package: deb test-package-deb

test-package-deb:
	env -u PYTHONPATH -u VIRTUAL_ENV PATH=$(DEB_PATH) /usr/bin/python3 -m pytest -p no:cacheprovider \
	    -o addopts="-ra --strict-markers" -W error --confcutdir=tests/package -v -s tests/package

# In a fresh debootstrap chroot of Debian 13 (root; tools/debian-chroot, outside the checkout):
# `make deb-build` with build-essential and the Build-Depends alone, both lintians' verdicts,
# then `make test-package-deb` on the .deb this machine built (`make test-package` first).
# deb-clean-12 and deb-clean-13: the clean build and lintian only; test-debian-13: then
# `make test-debian` on Debian 13's python3 and libraries.
test-package-13:
	tools/debian-chroot trixie test-package
test-debian-13:
	tools/debian-chroot trixie test-debian
deb-clean-12:
	tools/debian-chroot bookworm build
deb-clean-13:
	tools/debian-chroot trixie build

schema:
	tools/trim-pve-schema

clean:
	rm -rf $(VENV) build dist backend/*.egg-info .pytest_cache
