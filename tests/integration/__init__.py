"""Integration tests: the real processes over real sockets (a package, so that its
conftest does not shadow tests/conftest.py)."""
