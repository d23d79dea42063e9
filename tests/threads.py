"""Running a test's body on many threads at once, lined up on a barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_threads"]


def run_threads(count: int, body: Callable[[int], Any]) -> list[Any]:
    """Run ``body(i)`` on ``count`` threads released together; return results, re-raise errors."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def main(index: int) -> None:
        try:
            barrier.wait()
            results[index] = body(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=main, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a thread is stuck (deadlock?)"
    if errors:
        raise errors[0]
    return results
