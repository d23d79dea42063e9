"""Reports a person can act on: every field of a report, and the README's report is real.

The README's example is run as the script it describes, in a fresh interpreter (so handle
numbers start at 0), and its printed report must be the README's text, line for line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

ROOT = Path(__file__).resolve().parent.parent

APP = textwrap.dedent(
    """\
    import numpy as np
    import ahipgraph as ahg


    @ahg.kernel(extents={"x": "n"})
    def scale(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
        x[:] *= 2


    async def main() -> None:
        device = ahg.get_device(0)
        upload = device.create_stream(non_blocking=True)
        compute = device.create_stream(non_blocking=True)
        ready = device.create_event()
        host = np.ones(1024, np.float32)
        buf = device.malloc(4096)
        await upload.memset(buf, 0, 4096)
        await upload.record_event(ready)
        await upload.memcpy(buf, host)
        await compute.wait_event(ready)
        await compute.launch_kernel(scale, 1, 1, (1024, buf))
        await device.synchronize()

    with ahg.race_check(on_race="collect") as rc:      # or "raise" (default), "warn"
        ahg.run(main())
    print(rc.reports[0])
    """
)


def readme_report() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"```text\n(race \(.*?)```", text, re.S)
    assert found is not None, "the README shows no race report"
    return found.group(1)


def test_the_readme_shows_the_report_its_example_prints(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    env = dict(os.environ)
    env.pop("AHIPGRAPH_RACE_CHECK", None)
    done = subprocess.run(
        [sys.executable, "app.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == readme_report()
    assert 'ahg.race_check(on_race="collect") as rc:' in (ROOT / "README.md").read_text()


@ahg.kernel
def stamp(t: ahg.Threads, x: ahg.Ptr[ahg.float32]) -> None:
    x[0] = 1.0


@pytest.mark.asyncio
async def test_every_field_of_a_report(device: ahg.Device) -> None:
    """A conservative kernel footprint against an exact copy: both sites, the bytes they
    share, the allocation's line, why they are unordered and the fix, each as documented."""
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    host = np.zeros(16, np.float32)
    with ahg.race_check(on_race="collect") as rc:
        buf = device.malloc(256)
        allocated = sys._getframe().f_lineno - 1
        await s1.launch_kernel(stamp, 1, 1, (buf + 64,))
        launched = sys._getframe().f_lineno - 1
        await s2.memcpy(host, buf + 128, 64)  # reads [128, 192): inside the kernel's range
        copied = sys._getframe().f_lineno - 1
        await device.synchronize()
    (report,) = rc.reports
    here = Path(__file__).name
    assert report.kind == "read-after-write"
    first, second = report.first, report.second
    assert re.fullmatch(r"op #\d+ Kernel 'stamp'", first.op)
    assert re.fullmatch(r"op #\d+ Memcpy DeviceToHost", second.op)
    assert first.where == f"stream #{s1.hid.slot}"
    assert second.where == f"stream #{s2.hid.slot}"
    assert first.source is not None
    assert first.source.endswith(f"{here}:{launched}")
    assert second.source is not None
    assert second.source.endswith(f"{here}:{copied}")
    # the kernel's pointer, undeclared: from the pointer to the allocation's end, read-write
    assert (first.start, first.end, first.precision, first.write) == (
        buf.address + 64,
        buf.address + 256,
        "conservative",
        True,
    )
    assert (second.start, second.end, second.precision, second.write) == (
        buf.address + 128,
        buf.address + 192,
        "exact",
        False,
    )
    assert report.allocation.startswith(f"allocation 0x{buf.address:x} (256 B, device 0, ")
    assert report.allocation.endswith(f"{here}:{allocated})")
    assert report.why.startswith(f"stream #{s2.hid.slot} has no ordering with stream #")
    assert report.fix.startswith("e = device.create_event(); await <stream #")
    assert first.op.split()[1] in report.fix
    assert second.op.split()[1] in report.fix
    assert report.fix_edge is None  # eager work: no graph edge to add
    lines = str(report).splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["first", "second", "why", "fix"]
    assert lines[1].endswith("(192 B, conservative)")
    destroy(s1, s2, buf)
