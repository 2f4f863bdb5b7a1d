"""How a front end's async method is its sync method, awaited: :func:`awaited`.

A front end's operation is written once, as a method of its sync class whose body is
one call of the runner (``runner.py``) and returns what that call returns::

    class Memory:
        def get(self, record_id: object, *, namespace: str | None = None) -> Experience:
            return self._runner.run_read(lambda: self._get_flow(record_id, namespace), key)

    class AsyncMemory:
        get = awaited(Memory.get)

Called on an :class:`~.runner.AsyncRunner`, the very same body returns the awaitable of
the result instead of the result, and :func:`awaited` awaits it. So the signature,
the docstring and the body exist once; the two front ends differ only in the runner
they hold (blocking or asyncio I/O), as httpx's ``Client`` / ``AsyncClient`` differ
only in their transports.

The rule for such a body: it *returns the runner's call*, and does nothing after it
(no ``[0]`` on the result, no second call): what happens to a result happens in the
flow, or in the runner's :data:`~.runner.Call` of several runs. A body that forgot the
``return`` would leave the async run unawaited; ``tests/_front.py`` runs every
operation both ways, and ``test_core_api`` checks that each async twin is a coroutine
function with the sync one's parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

__all__ = ["awaited"]

P = ParamSpec("P")
R = TypeVar("R")


def awaited(
    method: Callable[Concatenate[Any, P], R],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The async twin of a sync front end's ``method`` (see the module's docstring).

    Args:
        method: a method of a sync front end whose body returns one call of its
            runner; the async front end that takes it has the same attributes the
            body uses, with an :class:`~.runner.AsyncRunner` as its ``_runner``. A
            method taking ``**kwargs`` marks ``self`` positional-only (``self, /``),
            so that no keyword could be taken for it.

    Returns:
        A coroutine function with ``method``'s name, parameters and docstring: it runs
        the body when awaited (so bad arguments raise at the ``await``, as from any
        ``async def``) and awaits what the async runner returned.
    """

    async def twin(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        # The body is typed for the sync runner; on the async one it returns the
        # awaitable of the same result (the module's docstring).
        return await cast(Awaitable[R], method(self, *args, **kwargs))

    functools.update_wrapper(twin, method)
    twin.__qualname__ = f"awaited({method.__qualname__})"
    return twin
