"""Tools built on the public API: timeline traces, plan pictures, the stress harness, the CLI."""

from .trace import Trace, tracing

__all__ = ["Trace", "tracing"]
