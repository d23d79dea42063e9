"""The plugin's fixtures in the setups a user's suite has: pytest-asyncio's auto mode, a uvloop
loop, fixtures of session and module scope around them, and tests that fail, skip, xfail,
error in setup or are parametrized. A test that fails and leaks gets both reported."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

CONFTEST = textwrap.dedent(
    """
    import pytest
    from ahipgraph import testing


    @pytest.fixture(scope="session")
    def session_devices():
        with testing.fresh_devices(2) as devices:
            yield devices


    @pytest.fixture(scope="module")
    def module_stream(session_devices):
        stream = session_devices[0].create_stream()
        yield stream
        stream.destroy()
    """
)

SUITE = textwrap.dedent(
    """
    import asyncio
    import pytest
    import ahipgraph as ahg

    KEPT = []


    async def test_runs_on_the_loop_configured(expected_loop, ahg_device):
        assert type(asyncio.get_running_loop()).__module__.split(".")[0] == expected_loop


    async def test_auto_mode_without_a_marker(ahg_device):
        stream = ahg_device.create_stream()
        await stream.synchronize()
        stream.destroy()


    def test_nested_in_a_session_block(session_devices, module_stream, ahg_device):
        assert ahg.device_count() == 1
        assert ahg.get_device(0) is ahg_device is not session_devices[0]


    def test_the_session_block_gets_its_devices_back(session_devices, module_stream):
        assert ahg.device_count() == 2
        assert ahg.get_device(0) is session_devices[0]


    async def test_fails_and_leaks(ahg_device):
        KEPT.append(ahg_device.malloc(64))
        assert False, "the test's own failure"


    async def test_skipped_after_a_leak(ahg_device):
        KEPT.append(ahg_device.malloc(32))
        pytest.skip("skipped")


    @pytest.mark.xfail(reason="known", strict=True)
    async def test_xfails(ahg_device):
        assert False


    @pytest.fixture
    def broken(ahg_device):
        raise RuntimeError("setup failed")


    def test_setup_error(broken):
        pass


    @pytest.mark.parametrize("count", [1, 2, 3])
    def test_parametrized(ahg_devices, count):
        ahg_devices(count)
        assert ahg.device_count() == count
    """
)


@pytest.mark.leaks_allowed("the user suite it runs in this process leaks on purpose")
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_fixtures_in_auto_mode_with_scoped_fixtures_around_them(
    pytester: pytest.Pytester, loop: str
) -> None:
    expected = f"\n@pytest.fixture\ndef expected_loop():\n    return {loop!r}\n"
    conftest = CONFTEST + expected
    if loop == "uvloop":
        pytest.importorskip("uvloop")
        conftest += textwrap.dedent(
            """
            import uvloop

            def pytest_asyncio_loop_factories(config, item):
                return {"uvloop": uvloop.new_event_loop}
            """
        )
    pytester.makeconftest(conftest)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_user_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=1, skipped=1, xfailed=1, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_fails_and_leaks*",
            "device 0: 1 allocation still allocated, 64 bytes in use",
            "*ERROR at teardown of test_skipped_after_a_leak*",
            "device 0: 1 allocation still allocated, 32 bytes in use",
            "*ERROR at setup of test_setup_error*",
            "*AssertionError: the test's own failure",
            "FAILED test_user_suite.py::test_fails_and_leaks - AssertionError*",
            "ERROR test_user_suite.py::test_fails_and_leaks - Failed: ahipgraph*",
        ]
    )
