"""The ``ahipgraph`` command (also ``python -m ahipgraph``): stress, trace and bench.

* ``ahipgraph stress [--seed N] [--duration S | --ops N] [--tasks T] [--threads K]
  [--no-faults]`` runs :func:`ahipgraph.testing.stress` (defaults: seed 0, 2,000 operations,
  8 tasks, 2 threads, fault injection on) with a progress bar; on a broken invariant it prints
  the seed, a minimal report and the command that runs the same run again (every option that
  differs from the defaults), and exits with status 1 (Ctrl-C: 130, SIGTERM: 143, once the
  run is cleaned up).
* ``ahipgraph trace [-o trace.json] SCRIPT [args...]`` runs a Python script as ``__main__``
  under :func:`ahipgraph.tracing` and writes the Chrome Trace Event file (everything after
  SCRIPT is the script's own argument list, as with ``python -m cProfile``). The trace is
  written however the script ends (Ctrl-C and SIGTERM included; ``os._exit`` alone skips
  it): a failing run is the one whose timeline is wanted.
* ``ahipgraph bench [--rounds N] [--full [--json PATH]]`` measures the launch host cost with
  tracing off and on, next to the figure recorded in ``bench/results/launch.json`` when run
  from a source checkout; with ``--full`` it runs the repository's ``bench/launch.py`` (the
  benchmark stays a script of the repository, not part of the installed package: it writes
  results files and compares loops), which writes its results to ``--json``'s file. Ctrl-C
  and SIGTERM end it as they end ``stress`` (status 130 and 143).

``ahipgraph --version`` prints the installed version (``ahipgraph.__version__``) and exits.

Terminal output goes through ``rich`` when it is installed (``pip install ahipgraph[cli]``) and
the output is a terminal; otherwise plain lines, as with ``--plain`` (before or after the
command's name). A file the command is to write is tried before anything runs, so a path that
cannot be written is a usage error (status 2), not a failure at the end of a long run; so is a
trace file that is the script itself, which the trace would overwrite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ._version import __version__

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[2]  # src/ahipgraph/cli.py -> the checkout, if any


class Output:
    """Progress and messages: rich when available on a terminal, plain lines otherwise."""

    def __init__(self, *, plain: bool = False) -> None:
        self.console: Any = None
        if not plain and sys.stdout.isatty():
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self.console = Console()
        self._last_plain = 0.0
        self._bar: Any = None

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)
        else:
            print(text, flush=True)

    def progress(self, label: str, total: float | None) -> Callable[[float, str], None]:
        """A callback ``update(done, detail)``; the bar ends when :meth:`done` is called."""
        if self.console is not None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            bar.start()
            task = bar.add_task(label, total=total, detail="")
            self._bar = bar

            def update(done: float, detail: str) -> None:
                bar.update(task, completed=done, detail=detail)

            return update

        def plain(done: float, detail: str) -> None:
            now = time.monotonic()
            if now - self._last_plain >= 2.0:  # a line every two seconds is enough for logs
                self._last_plain = now
                print(f"{label}: {detail}", flush=True)

        return plain

    def done(self) -> None:
        bar = self._bar
        if bar is not None:
            bar.stop()
            self._bar = None


def _stress(args: argparse.Namespace, out: Output) -> int:
    from .testing.stress import DEFAULT_OPS, StressReport, StressViolation, stress

    duration = args.duration
    ops = args.ops if args.ops is not None or duration is not None else DEFAULT_OPS
    total = float(ops) if ops is not None else duration
    update = out.progress(f"stress seed {args.seed}", total)
    started = time.monotonic()

    def progress(report: StressReport) -> None:
        done = report.ops if ops is not None else time.monotonic() - started
        update(done, f"{report.ops} ops, {report.checks} checks")

    try:
        report = stress(
            seed=args.seed,
            ops=ops,
            duration=duration,
            tasks=args.tasks,
            threads=args.threads,
            faults=not args.no_faults,
            progress=progress,
        )
    except StressViolation as violation:
        out.done()
        out.say(f"FAILED\n{violation}")
        return 1
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM) ends a long run: the harness drained and cleaned up before this.
        out.done()
        out.say(f"interrupted: stress seed {args.seed}")
        return _interrupt_status()
    out.done()
    out.say(f"ok: {report.summary()}")
    return 0


def _trace(args: argparse.Namespace, out: Output) -> int:
    from .tools.trace import tracing

    script = Path(args.script)
    # The script may change the working directory: the trace goes where the command was
    # told, as ``python -m cProfile -o`` does it.
    output = Path(args.output).absolute()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args.args]
    # ``python script.py`` puts the script's directory first on the path, so the script
    # imports the modules beside it; ``runpy.run_path`` does not (as ``cProfile`` does it).
    sys.path.insert(0, str(script.resolve().parent))
    status = 0
    with tracing() as trace:
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit_:
            # ``raise SystemExit(main())`` ends most scripts: the trace is still written, and
            # the command exits with the script's status, as ``python script.py`` would.
            status = _exit_status(exit_.code)
        except KeyboardInterrupt:
            # Ctrl-C (or SIGTERM) on a long run: keep what was traced so far.
            traceback.print_exc()
            status = _interrupt_status()
        except BaseException:
            # A script that fails is the one whose timeline is wanted: print its traceback
            # and exit 1, as ``python script.py`` would, but keep the trace. Not only an
            # Exception: a main task cancelled ends ``asyncio.run`` with CancelledError.
            traceback.print_exc()
            status = 1
        finally:
            sys.argv = saved_argv
            sys.path[:] = saved_path
    try:
        trace.save(output)
    except OSError as error:  # writable when checked, not any more (a full disk, say)
        print(f"ahipgraph trace: cannot write {args.output!r}: {error}", file=sys.stderr)
        return status or 1
    out.say(
        f"wrote {args.output}: {len(trace.ops)} ops, {len(trace.flows)} signal flows, "
        f"{len(trace.enqueues)} host enqueues; open it in https://ui.perfetto.dev "
        "or chrome://tracing"
    )
    return status


class _Sigterm:
    """SIGTERM handled as Ctrl-C while a command runs.

    ``timeout``, ``kill`` and a cancelled CI job send SIGTERM, whose default kills the process
    on the spot: ``trace`` wrote no trace and ``stress`` printed no seed. The handler hands the
    signal on as SIGINT, so whoever answers Ctrl-C answers it the same way (``asyncio.run``
    and ``anyio.run`` cancel their main task, then raise ``KeyboardInterrupt``; a raise from
    the handler itself could land inside any task and be logged as never retrieved), and
    remembers it, so the command exits with SIGTERM's status.
    """

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: object) -> None:
        self.received = True
        if callable(signal.getsignal(signal.SIGINT)):
            signal.raise_signal(signal.SIGINT)
        else:  # SIGINT ignored (a background job) or not Python's: interrupt here
            raise KeyboardInterrupt


_SIGTERM = _Sigterm()


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM interrupts the command as Ctrl-C does (main thread only: a signal handler can
    only be set there), and the caller's handler comes back after."""
    _SIGTERM.received = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt_status() -> int:
    """The shell's status for a program ended by the signal: 128 + SIGTERM's 15 or SIGINT's 2."""
    return 128 + (signal.SIGTERM if _SIGTERM.received else signal.SIGINT)


def _exit_status(code: object) -> int:
    """The process status ``SystemExit(code)`` stands for (a message is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    # The script's object: its __str__ is user code, which may raise anything. Python then
    # prints nothing and exits 1, and the trace must still be written.
    try:
        text = str(code)
    except BaseException:
        return 1
    print(text, file=sys.stderr)
    return 1


def _bench(args: argparse.Namespace, out: Output) -> int:
    try:
        return _bench_run(args, out)
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM) ends a long run as it ends ``stress``: the measurement gave
        # back what it made, and the status is the signal's, not a traceback's.
        out.done()
        out.say("interrupted: bench")
        return _interrupt_status()


def _bench_run(args: argparse.Namespace, out: Output) -> int:
    from .tools.launch_bench import measure_launch_host

    recorded = _recorded_launch_figure()
    update = out.progress("bench", float(args.rounds * 2))
    figures = measure_launch_host(rounds=args.rounds, progress=update)
    out.done()
    out.say(f"launch host cost, 10-node chain, median of {args.rounds} rounds (us per launch):")
    out.say(f"  tracing off: {figures['off']:.2f}")
    out.say(f"  tracing on:  {figures['on']:.2f}")
    if recorded is not None:
        out.say(f"  recorded in bench/results/launch.json (asyncio, 10 nodes): {recorded:.2f}")
    if args.full:
        script = REPO / "bench" / "launch.py"
        if not script.exists():
            out.say("bench/launch.py is not here: --full needs a source checkout")
            return 1
        saved_argv = sys.argv
        sys.argv = [str(script), *(["--json", args.json] if args.json else [])]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = saved_argv
    return 0


def _recorded_launch_figure() -> float | None:
    results = REPO / "bench" / "results" / "launch.json"
    try:
        data = json.loads(results.read_text())
        return float(data["loops"]["asyncio"]["launch_host_us"]["10"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _count(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int from ``minimum`` to ``maximum`` (a bad one is a usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is above the maximum of {maximum}")
        return value

    return parse


def _seconds(text: str) -> float:
    """An argparse type: a positive finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive finite number of seconds")
    return value


def _check_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, before anything runs, the arguments that would fail only at the end."""
    if args.command == "stress" and args.tasks + args.threads == 0:
        parser.error("stress needs at least one task or thread")
    if args.command == "trace" and not Path(args.script).is_file():
        parser.error(f"trace: no script file at {args.script!r}")
    output = args.output if args.command == "trace" else None
    if args.command == "bench" and args.json:
        if not args.full:
            parser.error("bench: --json names where --full writes its results; add --full")
        output = args.json
    if output is not None and not Path(output).resolve().parent.is_dir():
        parser.error(f"no directory to write {output!r} in")
    if output is not None and Path(output).is_dir():
        parser.error(f"{output!r} is a directory")
    if args.command == "trace" and _same_file(Path(args.output), Path(args.script)):
        # ``-o`` and SCRIPT swapped, or one name typed twice: the trace would overwrite the
        # user's script once it ran.
        parser.error(f"trace: the trace file {output!r} is the script itself")
    if output is not None:
        problem = _unwritable(Path(output))
        if problem is not None:
            parser.error(f"cannot write {output!r}: {problem}")


def _same_file(first: Path, second: Path) -> bool:
    """Whether both paths name one existing file (through a link or another spelling too)."""
    try:
        return first.samefile(second)
    except OSError:  # either is missing (or unreadable): not one file that exists
        return False


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written, or None; tried by opening it, as the write will (a
    permission check alone says yes to root on a read-only or virtual file system). A file
    that was not there is removed again."""
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as error:
        return error.strerror or str(error)
    if not existed:
        path.unlink(missing_ok=True)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    from .testing.stress import DEFAULT_OPS, DEFAULT_TASKS, DEFAULT_THREADS, MAX_TASKS, MAX_THREADS

    parser = argparse.ArgumentParser(prog="ahipgraph", description=__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true", help="plain lines, no progress bar")
    parser.add_argument("--version", action="version", version=f"ahipgraph {__version__}")
    # ``--plain`` after the command's name too; SUPPRESS keeps a command that was not given it
    # from resetting the one given before the name.
    plain = argparse.ArgumentParser(add_help=False)
    plain.add_argument(
        "--plain",
        action="store_true",
        default=argparse.SUPPRESS,
        help="plain lines, no progress bar",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    stress = commands.add_parser(
        "stress", parents=[plain], help="random graphs from many tasks and threads"
    )
    stress.add_argument("--seed", type=int, default=0, help="fixes every random choice (default 0)")
    limit = stress.add_mutually_exclusive_group()
    limit.add_argument("--duration", type=_seconds, help="seconds to run")
    limit.add_argument("--ops", type=_count(1), help=f"operations to run (default {DEFAULT_OPS})")
    stress.add_argument(
        "--tasks",
        type=_count(0, MAX_TASKS),
        default=DEFAULT_TASKS,
        help=f"async workers (default {DEFAULT_TASKS}, at most {MAX_TASKS})",
    )
    stress.add_argument(
        "--threads",
        type=_count(0, MAX_THREADS),
        default=DEFAULT_THREADS,
        help=f"thread workers (default {DEFAULT_THREADS}, at most {MAX_THREADS})",
    )
    stress.add_argument("--no-faults", action="store_true", help="no fault injection")

    trace = commands.add_parser(
        "trace", parents=[plain], help="run a script under tracing, write the trace"
    )
    trace.add_argument("script")
    trace.add_argument(
        "-o", "--output", default="trace.json", help="the trace file (default trace.json)"
    )
    script_args = trace.add_argument(
        "args", nargs=argparse.REMAINDER, help="arguments for the script"
    )
    # argparse counts a REMAINDER positional as required: a missing SCRIPT was reported as
    # "the following arguments are required: script, args", though the script needs none.
    script_args.required = False

    bench = commands.add_parser(
        "bench", parents=[plain], help="launch host cost, tracing off and on"
    )
    bench.add_argument("--rounds", type=_count(1), default=9, help="rounds (default 9)")
    bench.add_argument("--full", action="store_true", help="also run bench/launch.py")
    bench.add_argument("--json", help="with --full: write bench/launch.py's results here")

    args = parser.parse_args(argv)
    _check_paths(parser, args)
    out = Output(plain=args.plain)
    run = {"stress": _stress, "trace": _trace, "bench": _bench}[args.command]
    try:
        with _sigterm_interrupts():
            return run(args, out)
    finally:
        # A run that raised (Ctrl-C, a failing script's own error) must not leave rich's bar
        # redrawing over the traceback from its thread, with the terminal's cursor hidden.
        out.done()
