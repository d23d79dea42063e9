"""The pytest plugin, used the way a user's project uses it: a small suite run with pytester.

The inner suite uses ``ahg_device`` and ``ahg_devices`` under pytest-asyncio and under anyio's
pytest plugin (asyncio backend); a test that leaks fails at teardown with the report; and a
test that leaves a kernel running does not make the next test's ``synchronize()`` fail.
"""

from __future__ import annotations

import textwrap

import pytest

from ahipgraph.testing import plugin

pytest_plugins = ["pytester"]

SUITE = textwrap.dedent(
    """
    import pytest
    import ahipgraph as ahg
    from ahipgraph import testing

    KEPT = []  # handles kept alive past their test (a dropped handle is freed, not leaked)


    @ahg.kernel
    def add(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
        x[0] += value


    async def add_one(device):
        x = device.malloc(4)
        stream = device.create_stream()
        await stream.launch_kernel(add, 1, 1, (1, x))
        await stream.synchronize()
        result = int(device.view(x, "int32", 1)[0])
        stream.destroy()
        device.free(x)
        return result


    @pytest.fixture
    def anyio_backend():
        return "asyncio"


    @pytest.mark.asyncio
    async def test_under_pytest_asyncio(ahg_device):
        assert await add_one(ahg_device) == 1


    @pytest.mark.anyio
    async def test_under_anyio(ahg_device):
        assert await add_one(ahg_device) == 1


    @pytest.mark.asyncio
    async def test_factory(ahg_devices):
        small = ahg.DeviceProperties(hardware_queues=2)
        first, second = ahg_devices(2, properties=small)
        assert len(second.queues) == 2
        assert await add_one(second) == 1


    @pytest.mark.asyncio
    async def test_leaks_memory_and_a_stream(ahg_device):
        ahg_device.malloc(64)
        KEPT.append(ahg_device.create_stream())  # alive at teardown, never destroyed


    @pytest.mark.asyncio
    async def test_leaves_a_failing_kernel_running(ahg_device):
        held = testing.HeldKernel("left_running")
        stream = ahg_device.create_stream()
        KEPT.append(stream)
        await held.launch(stream)
        await held.started.wait()


    @pytest.mark.asyncio
    async def test_next_test_synchronizes_cleanly(ahg_device):
        await ahg_device.synchronize()
        assert await add_one(ahg_device) == 1
    """
)


@pytest.mark.leaks_allowed("the user suite it runs in this process leaks streams on purpose")
def test_fixtures_work_under_both_plugins_and_leaks_fail_with_the_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "anyio")
    result.assert_outcomes(passed=6, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaks_memory_and_a_stream*",
            "*ahipgraph: still alive, in flight or allocated at teardown:",
            "*device 0: 1 allocation still allocated, 64 bytes in use",
            "*live handles: 1 stream",
            "*ERROR at teardown of test_leaves_a_failing_kernel_running*",
            "*live handles: 1 stream",
        ]
    )


def test_the_plugin_provides_fixtures_only() -> None:
    hooks = [name for name in vars(plugin) if name.startswith("pytest_")]
    assert hooks == []
    assert sorted(plugin.__all__) == ["ahg_device", "ahg_devices", "ahg_race_check"]
