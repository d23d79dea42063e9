"""Core layer: errors, handle registries, reference counts, the wait primitive and the clock.

Nothing here knows about devices; every other layer builds on these pieces. Import from the
modules themselves (``from ..core.errors import InvalidValue``).
"""
