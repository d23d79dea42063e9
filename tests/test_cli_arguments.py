"""The ``ahipgraph`` command's arguments: what its documentation names, paths it cannot write."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import ahipgraph.cli as cli
from ahipgraph.cli import main
from cli_scripts import one_memset_script

_LONG_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def test_the_documentation_names_every_option_and_only_those(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The module documentation said ``bench [--reps N]`` (the flag is ``--rounds``) and
    did not name ``stress --no-faults``."""
    taken: set[str] = set()
    for command in ([], ["stress"], ["trace"], ["bench"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        taken |= set(_LONG_OPTION.findall(capsys.readouterr().out))
    taken -= {"--help", "--output"}  # ``--output`` is documented by its short form, ``-o``
    documented = set(_LONG_OPTION.findall(cli.__doc__ or ""))
    assert documented == taken
    assert "bench [--rounds N]" in (cli.__doc__ or "")


def test_plain_is_accepted_after_the_command_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = one_memset_script(tmp_path, "ahg.run(work)\n")
    output = tmp_path / "trace.json"
    assert main(["trace", "--plain", "-o", str(output), str(script)]) == 0
    assert output.exists()
    assert "1 ops" in capsys.readouterr().out


def test_plain_given_before_the_name_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def fake(args: object, out: cli.Output) -> int:
        seen.append(getattr(args, "plain", None))
        return 0

    monkeypatch.setattr(cli, "_stress", fake)
    assert main(["--plain", "stress", "--ops", "1"]) == 0
    assert main(["stress", "--ops", "1"]) == 0
    assert seen == [True, False]


NO_FILES_HERE = "/proc/self"  # a directory nobody can create a file in, root included
needs_proc = pytest.mark.skipif(not Path(NO_FILES_HERE).is_dir(), reason="no /proc here")


@needs_proc
def test_a_trace_path_that_cannot_be_written_is_refused_before_the_script_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc/self`` is a directory nobody can create a file in (root included): the script
    ran to its end and the command then died with a traceback, the trace lost."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "trace", "-o", "/proc/self/trace.json", str(script)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cannot write '/proc/self/trace.json'" in err
    assert not marker.exists()


def test_probing_the_output_leaves_no_file_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path is tried before the script runs; a file that was not there is not left."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.py"
    script.write_text("import os\nprint('out.json', os.path.exists('out.json'))\n")
    assert main(["--plain", "trace", "-o", "out.json", str(script)]) == 0
    assert "out.json False" in capsys.readouterr().out
    assert (tmp_path / "out.json").read_text().startswith("{")


@pytest.mark.parametrize(("ending", "status"), [("", 1), ("raise SystemExit(3)\n", 3)])
def test_a_trace_that_cannot_be_saved_at_the_end_is_reported_without_a_traceback(
    ending: str,
    status: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The directory goes away while the script runs: a message, and status 1 unless the
    script's own status already says it failed."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    where = tmp_path / "out"
    where.mkdir()
    script = tmp_path / "script.py"
    script.write_text(f"import shutil\nshutil.rmtree({str(where)!r})\n{ending}")
    assert main(["--plain", "trace", "-o", str(where / "t.json"), str(script)]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cannot write" in err


@needs_proc
def test_bench_json_that_cannot_be_written_is_refused_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "bench", "--full", "--json", "/proc/self/launch.json"])
    assert exit_info.value.code == 2
    assert "cannot write" in capsys.readouterr().err


def test_bench_full_gives_the_caller_its_argv_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--full`` ran ``bench/launch.py`` with its own ``sys.argv`` and left it there."""
    checkout = tmp_path / "checkout"
    (checkout / "bench").mkdir(parents=True)
    (checkout / "bench" / "launch.py").write_text("import sys\nassert sys.argv[1] == '--json'\n")
    monkeypatch.setattr(cli, "REPO", checkout)
    before = ["caller", "argv"]
    monkeypatch.setattr(sys, "argv", list(before))
    status = main(
        ["--plain", "bench", "--rounds", "1", "--full", "--json", str(tmp_path / "r.json")]
    )
    assert status == 0
    assert sys.argv == before


def test_version_prints_the_package_version_and_exits_cleanly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import ahipgraph

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"ahipgraph {ahipgraph.__version__}\n"
