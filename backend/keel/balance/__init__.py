"""Deciding which guests to move: load metrics, rules, planners, guards and the executor.

Pure code: nothing here talks to PVE or reads the clock (``now`` comes in as an
argument).  ``metrics`` holds the imbalance figures Keel, PVE and ProxLB use.
"""
