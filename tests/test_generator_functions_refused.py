"""A generator function given as a host function or a user-object destructor is refused.

Calling a generator function (sync or ``async``) only makes a generator: its body never runs.
The queue called a host function made so, found nothing to await, and the host function passed
for done having done nothing, on a stream, in a graph and through
``exec.set_host_node_params`` alike; a destructor made so "ran" when the last reference went,
and freed nothing. Both are a ``TypeError`` now, before anything is enqueued, created or
changed, as a coroutine function given as a destructor is (and a generator function as a
kernel body).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy

ran: list[str] = []


def sync_generator() -> Iterator[None]:
    ran.append("sync")
    yield


async def async_generator() -> AsyncIterator[None]:
    ran.append("async")
    yield


class GeneratorCall:
    def __call__(self) -> Iterator[None]:
        ran.append("object")
        yield


GENERATOR_FUNCTIONS: list[Callable[..., Any]] = [
    sync_generator,
    async_generator,
    GeneratorCall(),
    functools.partial(sync_generator),
]
NAMES = ["sync", "async", "callable-object", "partial"]
MESSAGE = "not a generator function"


@pytest.mark.asyncio
@pytest.mark.parametrize("fn", GENERATOR_FUNCTIONS, ids=NAMES)
async def test_a_stream_refuses_a_generator_function_and_enqueues_nothing(
    device: ahg.Device, fn: Callable[..., Any]
) -> None:
    stream = device.create_stream()
    before = device.statistics().queues
    with pytest.raises(TypeError, match=MESSAGE):
        await stream.launch_host_func(fn)
    with pytest.raises(TypeError, match=MESSAGE):
        stream.launch_host_func_nowait(fn)
    assert device.statistics().queues == before
    await stream.synchronize()  # no failure was left behind either
    assert ran == []
    stream.destroy()


@pytest.mark.parametrize("fn", GENERATOR_FUNCTIONS, ids=NAMES)
def test_a_graph_and_an_executable_refuse_a_generator_function(fn: Callable[..., Any]) -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match=MESSAGE):
        graph.add_host_node(fn)
    assert graph.nodes() == []
    node = graph.add_host_node(lambda: None)
    graph_exec = graph.instantiate()
    with pytest.raises(TypeError, match=MESSAGE):
        graph_exec.set_host_node_params(node, fn)
    with pytest.raises(TypeError, match=MESSAGE):
        ahg.host_function(fn)
    destroy(graph_exec, graph)


@pytest.mark.parametrize("fn", GENERATOR_FUNCTIONS, ids=NAMES)
def test_a_user_object_refuses_a_generator_function_as_its_destructor(
    fn: Callable[..., Any],
) -> None:
    with pytest.raises(TypeError, match=MESSAGE):
        ahg.UserObject(fn, data="never freed")
    assert ran == []  # and the leak check at teardown finds no user object registered
