"""The simulator's API handlers, one module per area, registered by ``@route``.

Importing ``keel.sim.api.handlers`` imports every area module so that all routes exist.
"""
