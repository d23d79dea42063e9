"""Scripts for the ``ahipgraph trace`` command's tests: one memset, then how the script ends."""

from __future__ import annotations

from pathlib import Path

_HEADER = "import asyncio\nimport ahipgraph as ahg\n"
# ``work`` makes exactly one device op, the memset: the command's summary says "1 ops".
_ONE_MEMSET = (
    "async def work():\n"
    "    device = ahg.get_device(0)\n"
    "    stream = device.create_stream()\n"
    "    out = device.malloc(8)\n"
    "    await (await stream.memset(out, 0, 8))\n"
    "    stream.destroy()\n"
    "    device.free(out)\n"
)


def one_memset_script(tmp_path: Path, after: str, *, inside: str = "") -> Path:
    """``script.py`` in ``tmp_path``: ``work`` does one memset then ``inside`` (lines of its
    body, indented), and the module goes on with ``after`` (how the script runs and ends)."""
    script = tmp_path / "script.py"
    script.write_text(_HEADER + _ONE_MEMSET + inside + after)
    return script
