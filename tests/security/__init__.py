"""Hostile tests: what an attacker with an account on the cluster, or none, could try
through keel-web and keel-engine (docs/security.md, "Who can do what, through which door").
A package, so that its conftest does not shadow tests/conftest.py."""
