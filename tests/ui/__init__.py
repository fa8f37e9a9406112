"""Playwright tests of the web UI plugin in the harness (a package, so that its conftest
does not shadow tests/conftest.py)."""
