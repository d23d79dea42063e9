"""The public surface under misuse: configuration records, kernel declaration,
handle reprs in every state and the command line.

Each test names what an outside test writer would try and what must happen: a clear error
where the mistake is made (not an ``AttributeError`` or a zero division in some later call),
a repr that tells the state, a trace that survives a failing script.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.cli import main
from cleanup import destroy
from cli_scripts import one_memset_script

# -- device configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("cost", None, TypeError),
        ("name", None, TypeError),
        ("max_threads_per_block", 0, ValueError),
        ("max_threads_per_block", 2.0, TypeError),
        ("max_shared_memory_per_block", -1, ValueError),
        ("warp_size", 0, ValueError),
        ("max_pitch", 0, ValueError),
        ("max_grid", (0, 1, 1), ValueError),
        ("max_grid", (1, 1), TypeError),
        ("max_grid", (1.0, 1, 1), TypeError),
    ],
)
def test_device_properties_refuse_a_limit_no_device_could_have(
    field: str, value: Any, error: type[Exception]
) -> None:
    """``DeviceProperties(cost=None)`` was accepted and the device then failed its first kernel
    with ``AttributeError: 'NoneType' object has no attribute 'kernel_ns'``; a zero limit made
    every launch an ``InvalidConfiguration`` that blamed the launch."""
    with pytest.raises(error, match=field):
        ahg.DeviceProperties(**{field: value})


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("lanes_per_cu", 0, ValueError),
        ("wave_ns", -1, ValueError),
        ("kernel_launch_ns", 1.5, TypeError),
        ("host_bytes_per_ns", 0, ValueError),
        ("device_bytes_per_ns", float("inf"), ValueError),
        ("peer_bytes_per_ns", float("nan"), ValueError),
        ("host_bytes_per_ns", "fast", TypeError),
        ("stream_memop_ns", True, TypeError),
    ],
)
def test_a_cost_model_refuses_rates_and_durations_that_break_the_clock(
    field: str, value: Any, error: type[Exception]
) -> None:
    """A zero rate divided by zero at the first copy, a zero ``lanes_per_cu`` at the first
    kernel, and a negative duration ran the simulated clock backwards."""
    with pytest.raises(error, match=field):
        ahg.CostModel(**{field: value})


def test_a_refused_configuration_leaves_the_configured_devices_as_they_were() -> None:
    before = ahg.get_device(0)
    with pytest.raises(ValueError):
        ahg.configure_devices(1, ahg.DeviceProperties(cost=ahg.CostModel(lanes_per_cu=0)))
    assert ahg.device_count() == 1
    assert ahg.get_device(0) is before


@pytest.mark.asyncio
async def test_a_device_with_integer_rates_runs_copies() -> None:
    """Rates may be ints (``host_bytes_per_ns=25``): validation must not insist on floats."""
    cost = ahg.CostModel(host_bytes_per_ns=25, device_bytes_per_ns=1000, peer_bytes_per_ns=64)
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(cost=cost))
    ptr = device.malloc(256)
    stream = device.create_stream()
    await (await stream.memset(ptr, 1, 256))
    assert device.statistics().now_ns == cost.fill_ns(256)
    destroy(stream, ptr)


# -- kernel declaration -----------------------------------------------------------------------


def _body(t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.int32]) -> None:
    out[:n] = 7


class _CallableBody:
    def __call__(self, t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.int32]) -> None:
        out[:n] = 7


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "name"),
    [(functools.partial(_body), "partial"), (_CallableBody(), "_CallableBody")],
    ids=["partial", "callable-object"],
)
async def test_a_kernel_body_without_a_name_of_its_own_declares_and_runs(
    device: ahg.Device, body: Any, name: str
) -> None:
    """``ahg.kernel(functools.partial(f))`` and a callable object raised ``AttributeError:
    ... has no attribute '__name__'`` although ``kernel`` accepts any callable."""
    declared = ahg.kernel(body)
    assert declared.name == name
    out = device.malloc(16)
    stream = device.create_stream()
    await (await stream.launch_kernel(declared, 1, 4, (4, out)))
    assert list(device.view(out, "int32", 4)) == [7, 7, 7, 7]
    destroy(stream, out)


class _AsyncCallableBody:
    async def __call__(self, t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.int32]) -> None:
        await asyncio.sleep(0)
        out[:n] = 9


@pytest.mark.asyncio
async def test_a_callable_object_with_an_async_call_is_an_async_kernel(device: ahg.Device) -> None:
    """``inspect.iscoroutinefunction`` does not look through ``__call__``: such a body was run
    as a plain one, and the coroutine it returned was never awaited (the kernel did nothing)."""
    declared = ahg.kernel(_AsyncCallableBody())
    out = device.malloc(16)
    stream = device.create_stream()
    await (await stream.launch_kernel(declared, 1, 4, (4, out)))
    assert list(device.view(out, "int32", 4)) == [9, 9, 9, 9]
    destroy(stream, out)


@pytest.mark.parametrize("name", [3, b"k", ["k"]])
def test_a_kernel_name_that_is_not_a_string_is_a_type_error(name: Any) -> None:
    """``@ahg.kernel(name=3)`` made ``<Kernel 3()>``, whose name DOT output and every error
    message then formatted as a number."""
    with pytest.raises(TypeError, match="kernel name"):
        ahg.kernel(name=name)(_body)


def test_a_kernel_given_a_name_names_itself_so_in_its_errors() -> None:
    def body(t: ahg.Threads, x: int) -> None:
        pass

    with pytest.raises(TypeError, match="kernel 'shown'"):
        ahg.kernel(body, name="shown")


# -- reprs in every state ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_destroyed_event_says_destroyed_in_its_repr(device: ahg.Device) -> None:
    """A destroyed event showed ``unrecorded``, ``pending`` or ``done``, as a live one does."""
    stream = device.create_stream()
    never, recorded = device.create_event(), device.create_event()
    await stream.record_event(recorded)
    never.destroy()
    recorded.destroy()  # its record is still in flight
    assert repr(never).endswith("destroyed>")
    assert repr(recorded).endswith("destroyed>")
    await stream.synchronize()
    assert repr(recorded).endswith("destroyed>")
    assert str(recorded) == repr(recorded)
    destroy(stream)


@pytest.mark.asyncio
async def test_a_capturing_stream_says_so_in_its_repr(device: ahg.Device) -> None:
    """A capturing stream's repr was that of an idle open stream, so a test failure showing
    it gave no hint that its work had become graph nodes."""
    stream = device.create_stream()
    assert "capture" not in repr(stream)
    stream.begin_capture()
    assert repr(stream).endswith("capture=active>")
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()  # invalidates the capture, as HIP does
    assert repr(stream).endswith("capture=invalidated>")
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert "capture" not in repr(stream)
    async with stream.capture() as scope:
        assert "capture=active" in repr(stream)
    assert "capture" not in repr(stream)
    destroy(scope.graph, stream)


@pytest.mark.asyncio
async def test_every_handle_repr_works_live_and_destroyed(device: ahg.Device) -> None:
    """Each handle's repr names its kind in both states, and never raises once destroyed."""

    @ahg.kernel
    def nothing(t: ahg.Threads) -> None:
        pass

    stream, event = device.create_stream(), device.create_event()
    graph = ahg.Graph()
    node = graph.add_kernel_node(nothing, 1, 1)
    user_object = ahg.UserObject(lambda data: None)
    exec_ = graph.instantiate()
    completion = await exec_.launch(stream)
    handles: dict[str, Any] = {
        "Stream": stream,
        "Event": event,
        "Graph": graph,
        "GraphNode": node,
        "UserObject": user_object,
        "GraphExec": exec_,
    }
    for kind, handle in handles.items():
        assert repr(handle).startswith(f"<{kind} ")
    await completion
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    event.destroy()
    user_object.release()
    for kind, handle in handles.items():
        text = repr(handle)
        assert text.startswith(f"<{kind} ")
        assert "destroyed" in text or "closed" in text, text
    assert repr(completion) == "<Completion done error=None>"


# -- the command line -------------------------------------------------------------------------


def test_the_cli_trace_writes_the_trace_of_a_script_that_raises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script ending in an uncaught exception lost its trace: the exception went through
    ``tracing()`` and the file was never written, though a failing run is the one whose
    timeline is wanted. Now the traceback is printed, the trace written, the status is 1."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = one_memset_script(
        tmp_path, "ahg.run(work)\n", inside="    raise RuntimeError('the script failed')\n"
    )
    output = tmp_path / "trace.json"
    assert main(["--plain", "trace", "-o", str(output), str(script)]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: the script failed" in captured.err
    assert "1 ops" in captured.out
    assert json.loads(output.read_text())["traceEvents"]


def test_the_cli_trace_hands_what_follows_the_script_to_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o`` after SCRIPT is the script's argument, as with ``python -m cProfile``; the module
    documentation used to show it there, where it never named the output."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    assert main(["--plain", "trace", "-o", "mine.json", str(script), "-o", "x"]) == 0
    assert "argv ['-o', 'x']" in capsys.readouterr().out
    assert (tmp_path / "mine.json").exists()
    assert not (tmp_path / "x").exists()
    import ahipgraph.cli as cli

    assert "trace [-o trace.json] SCRIPT" in (cli.__doc__ or "")


def test_the_cli_bench_refuses_json_without_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench --json out.json`` without ``--full`` ran the whole benchmark and wrote nothing,
    saying nothing about the ignored option."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "bench", "--rounds", "1", "--json", str(tmp_path / "out.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "--full" in err.strip().splitlines()[-1]


def test_the_cli_trace_keeps_the_trace_of_an_interrupted_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in a long traced run lost everything traced so far; now the trace is written
    and the status is 130, the shell's status for a program ended by SIGINT."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = one_memset_script(tmp_path, "ahg.run(work)\nraise KeyboardInterrupt\n")
    output = tmp_path / "trace.json"
    assert main(["--plain", "trace", "-o", str(output), str(script)]) == 130
    captured = capsys.readouterr()
    assert "KeyboardInterrupt" in captured.err
    assert "1 ops" in captured.out
    assert output.exists()
