"""Agent tools over Hindsight's experience records: search, write, report usage, and
(``versions=True``) correct a lesson and read its versions (docs/versions.md); with
``read=``, search and usage feedback also reach namespaces shared with the agent
(docs/sharing.md).

The tools read the store from the graph's runtime (``ToolRuntime``, i.e. the store
passed to ``compile(store=...)``), which must be a :class:`HindsightStore`, and the
namespace from the run's config: each label written ``"{name}"`` in the template is
replaced by ``config["configurable"][name]``::

    tools = create_memory_tools(namespace=("lessons", "{user_id}"))
    graph = builder.compile(store=HindsightStore())
    graph.invoke(inputs, {"configurable": {"user_id": "u42"}})

Everything they do is a call into the core (``store.memory`` / ``store.amemory``),
each tool written once as a generator of those calls (:data:`Steps`) that a sync and
an async driver run; results are compact JSON: the lesson and its trigger first,
with an id for feedback.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, ParamSpec

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime

from hindsight_core.errors import HindsightError, NotFoundError, ValidationError
from hindsight_core.runtime.driver import Plan

DEFAULT_NAMESPACE: tuple[str, ...] = ("lessons", "{user_id}")
P = ParamSpec("P")

SEARCH_DESCRIPTION = (
    "Recall lessons learned in earlier runs. Call this BEFORE starting a task or a risky "
    "step (deleting, paying, sending, changing configuration) with a short description of "
    "what you are about to do. Returns the most relevant lessons (lesson, trigger, id). "
    "Follow the lessons that apply, and afterwards report which ones helped with "
    "update_memory_usage."
)
WRITE_DESCRIPTION = (
    "Store a lesson for future runs. Call this when you found out something reusable: a "
    "mistake to avoid, a step that was needed, a user preference. `lesson` is one short "
    "actionable sentence; `trigger` says when it applies. Do not store facts about the "
    "current task only, or secrets."
)
USAGE_DESCRIPTION = (
    "Report whether a recalled lesson helped. Call this after a task for each lesson id "
    "returned by search_memory that you used (helpful=true) or that was wrong or "
    "irrelevant (helpful=false). Helpful lessons rank higher next time."
)

SUPERSEDE_DESCRIPTION = (
    "Correct a recalled lesson that proved wrong or outdated. Call this with its id, the "
    "corrected lesson (one short sentence) and why: the correction becomes its new version "
    "and is recalled from now on; the old one is kept in its history."
)
HISTORY_DESCRIPTION = (
    "Show every version of a lesson, oldest first, from the id of any of them: what it "
    "said, and when and why each version was replaced. Call this before correcting a "
    "lesson that may have been corrected already."
)


def resolve_namespace(template: tuple[str, ...], config: RunnableConfig | None) -> tuple[str, ...]:
    """Fill ``"{name}"`` labels from ``config["configurable"]``."""
    configurable = (config or {}).get("configurable") or {}
    out = []
    for label in template:
        if label.startswith("{") and label.endswith("}"):
            name = label[1:-1]
            if name not in configurable:
                raise ValidationError(
                    f"the memory namespace needs config['configurable'][{name!r}] (template "
                    f"{template}); pass it when invoking the graph",
                    field=name,
                )
            out.append(str(configurable[name]))
        else:
            out.append(label)
    return tuple(out)


def _store(runtime: Any, fixed: Any) -> Any:
    store = fixed if fixed is not None else getattr(runtime, "store", None)
    if store is None:
        from langgraph.config import get_store

        store = get_store()
    if not hasattr(store, "memory") or not hasattr(store, "amemory"):
        raise ValidationError(
            f"memory tools need a HindsightStore as the graph's store, got "
            f"{type(store).__name__}; compile the graph with store=HindsightStore()",
            field="store",
        )
    return store


def _source(config: RunnableConfig | None) -> dict[str, str]:
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return {"agent": "langgraph", **({"task": str(thread)} if thread is not None else {})}


def _dump(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def _error(exc: HindsightError) -> str:
    return _dump({"error": str(exc)})


Steps = Generator[Any, Any, str]
"""A tool written once, as the core's flows are: it yields the store it works on and
gets back that store's memory (``Memory`` in the sync tool, ``AsyncMemory`` in the
async one), then yields each call it makes on that memory and gets back the call's
result (``result = yield mem.recall(...)``); it returns the tool's answer."""


def _answered(steps: Steps, memory: str) -> Steps:
    """``steps`` given the store's ``memory`` (``"memory"`` or ``"amemory"``), with a
    Hindsight error (raised in it, or thrown in at a ``yield``) as its answer. Written
    once: the two drivers below only carry out the calls, one of them awaiting."""
    try:
        reply: Any = getattr(next(steps), memory)
        while True:
            reply = yield steps.send(reply)
    except StopIteration as done:
        answer: str = done.value
        return answer
    except HindsightError as exc:
        return _error(exc)


def _sync_tool(tool: Callable[P, Steps]) -> Callable[P, str]:
    """``tool`` on the store's ``Memory``: a call's result is there when it is yielded."""

    def run(*args: P.args, **kwargs: P.kwargs) -> str:
        plan = Plan(_answered(tool(*args, **kwargs), "memory"))
        for result in plan:
            plan.reply = result
        return plan.result

    functools.update_wrapper(run, tool)
    return run


def _async_tool(tool: Callable[P, Steps]) -> Callable[P, Coroutine[Any, Any, str]]:
    """``tool`` on the store's ``AsyncMemory``: each call awaited, its error thrown back."""

    async def run(*args: P.args, **kwargs: P.kwargs) -> str:
        plan = Plan(_answered(tool(*args, **kwargs), "amemory"))
        for call in plan:
            try:
                plan.reply = await call
            except HindsightError as exc:
                plan.error = exc
        return plan.result

    functools.update_wrapper(run, tool)
    return run


def _both(tool: Callable[..., Steps], name: str, description: str) -> BaseTool:
    """The LangChain tool of ``tool``, sync and async (its arguments from its signature)."""
    return StructuredTool.from_function(
        func=_sync_tool(tool), coroutine=_async_tool(tool), name=name, description=description
    )


def create_memory_tools(
    namespace: tuple[str, ...] = DEFAULT_NAMESPACE,
    *,
    store: Any = None,
    top_k: int = 5,
    versions: bool = False,
    read: Sequence[tuple[str, ...] | str] = (),
) -> list[BaseTool]:
    """The three memory tools, bound to a namespace template.

    Args:
        namespace: labels, with ``"{name}"`` filled from ``config["configurable"]``.
        store: a :class:`HindsightStore` to use instead of the graph's store.
        top_k: how many lessons ``search_memory`` returns.
        versions: also ``supersede_memory`` and ``memory_history`` (opt-in: a list of
            three unpacked as such keeps working).
        read: namespaces the agent also reads (templates like ``namespace``, or strings
            of labels joined by ``/``; a last label ``*`` reads that namespace and all
            under it, e.g. ``("lessons", "{team}", "*")``): ``search_memory`` ranks them
            with its own as one collection and names each lesson's ``namespace``;
            ``update_memory_usage`` gives feedback on a lesson of any of them, recorded
            as given by the agent's namespace. Writing and correcting stay in the
            agent's own namespace (docs/sharing.md).

    Returns:
        ``[search_memory, write_memory, update_memory_usage]`` (then
        ``supersede_memory, memory_history``).
    """
    template = tuple(namespace)
    reads = [tuple(r.split("/")) if isinstance(r, str) else tuple(r) for r in read]

    def _ns(runtime: Any) -> tuple[str, ...]:
        return resolve_namespace(template, getattr(runtime, "config", None))

    def _scope(runtime: Any) -> dict[str, Any]:
        """``search``'s namespace arguments: the agent's own, or it and ``read``'s."""
        own = _ns(runtime)
        if not reads:
            return {"namespace": own}
        config = getattr(runtime, "config", None)
        return {"namespaces": [own, *(resolve_namespace(r, config) for r in reads)]}

    def _hit(hit: Any) -> dict[str, Any]:
        return {**hit.compact(), "namespace": "/".join(hit.namespace)} if reads else hit.compact()

    def _search_result(result: Any) -> str:
        out: dict[str, Any] = {"lessons": [_hit(hit) for hit in result.hits]}
        if result.warning:
            out["warning"] = result.warning
        return _dump(out)

    def search(query: str, runtime: ToolRuntime, scene: str | None = None) -> Steps:
        mem = yield _store(runtime, store)
        return _search_result(
            (yield mem.recall(query, **_scope(runtime), scene=scene, top_k=top_k))
        )

    def _record(
        lesson: str, trigger: str, scene: str, outcome: str, runtime: Any
    ) -> dict[str, Any]:
        return {
            "lesson": lesson,
            "trigger": trigger,
            "scene": scene,
            "outcome": outcome,
            "source": _source(getattr(runtime, "config", None)),
        }

    def write(
        lesson: str, trigger: str, runtime: ToolRuntime, scene: str = "general", outcome: str = ""
    ) -> Steps:
        mem = yield _store(runtime, store)
        record = _record(lesson, trigger, scene, outcome, runtime)
        res = yield mem.write(record, namespace=_ns(runtime))
        return _dump({"id": str(res.id), "status": res.status})

    def _usage(rec: Any) -> str:
        return _dump(
            {"id": str(rec.id), "score": round(rec.decayed_score, 4), "use_count": rec.use_count}
        )

    def _used_at(id: str, where: Any, runtime: Any) -> dict[str, Any]:
        # mark_used's namespace (where the lesson was found: among the read namespaces,
        # else the own one) and its ``by`` (the agent's own namespace).
        if where is None:
            raise NotFoundError(f"no record {id} in the namespaces this agent reads")
        return {"namespace": where, "by": "/".join(_ns(runtime))}

    def usage(id: str, runtime: ToolRuntime, helpful: bool = True) -> Steps:
        mem, scope = (yield _store(runtime, store)), _scope(runtime)
        where = (yield mem.locate(id, **scope)) if reads else scope["namespace"]
        return _usage((yield mem.mark_used(id, helpful, **_used_at(id, where, runtime))))

    def _correction(lesson: str, trigger: str | None, runtime: Any) -> dict[str, Any]:
        # scene, action, outcome (and the trigger, unless given): the old version's
        record = {"lesson": lesson, "source": _source(getattr(runtime, "config", None))}
        return record if trigger is None else {**record, "trigger": trigger}

    def _superseded(res: Any) -> str:
        return _dump({"id": str(res.id), "supersedes": str(res.supersedes)})

    def supersede(
        id: str,
        lesson: str,
        reason: str,
        runtime: ToolRuntime,
        trigger: str | None = None,
    ) -> Steps:
        mem, record = (yield _store(runtime, store)), _correction(lesson, trigger, runtime)
        return _superseded((yield mem.supersede(id, record, reason=reason, namespace=_ns(runtime))))

    def _chain(chain: list[Any]) -> str:
        keep = ("version", "lesson", "trigger", "superseded_at", "superseded_reason")
        return _dump(
            {
                "versions": [
                    {"id": str(r.id), **r.model_dump(mode="json", include=set(keep))}
                    | {"current": r.superseded_by is None}
                    for r in chain
                ]
            }
        )

    def history(id: str, runtime: ToolRuntime) -> Steps:
        mem = yield _store(runtime, store)
        return _chain((yield mem.history(id, namespace=_ns(runtime))))

    extra = [
        _both(supersede, "supersede_memory", SUPERSEDE_DESCRIPTION),
        _both(history, "memory_history", HISTORY_DESCRIPTION),
    ]
    return [
        _both(search, "search_memory", SEARCH_DESCRIPTION),
        _both(write, "write_memory", WRITE_DESCRIPTION),
        _both(usage, "update_memory_usage", USAGE_DESCRIPTION),
        *(extra if versions else []),
    ]


search_memory, write_memory, update_memory_usage = create_memory_tools()
"""Ready-made tools for the default namespace ``("lessons", "{user_id}")``."""
