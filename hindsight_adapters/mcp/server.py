"""The Hindsight MCP server: a few precise tools over :class:`~hindsight_core.AsyncMemory`.

Everything goes through the core (no SQL here). The caller's grant (the namespace
it writes, and what else it may read) is the one its bearer token maps to (HTTP)
or the configured one (stdio); see ``_auth.py`` and ``_grants.py``, and
``_sharing.py`` for what a tool may do with a record of another namespace. Core
errors become tool errors (``isError``) whose message names the offending field;
nothing is written when a call fails.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from hindsight_core import __version__
from hindsight_core.arguments import MAX_TOP_K
from hindsight_core.errors import (
    DatabaseBusyError,
    DatabaseError,
    HindsightError,
    NotFoundError,
    ValidationError,
)
from hindsight_core.models import MAX_LABEL_CHARS, Namespace

from .._grants import Grant, show
from . import _reflect, _sharing
from ._auth import CURRENT_GRANT
from ._busy import busy_error
from ._models import (
    MAX_TEXT,
    ForgetOutcome,
    HistoryOut,
    MemoryHit,
    ReflectOutcome,
    ReviewOutcome,
    SearchResult,
    StatsOut,
    SupersedeOutcome,
    TrajectoryIn,
    UsageOutcome,
    VersionOut,
    WriteOutcome,
)
from ._pending import PendingMemory

if TYPE_CHECKING:
    from hindsight_core import AsyncMemory
    from hindsight_core.warmup import Warmup

log = logging.getLogger("hindsight.mcp")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

INSTRUCTIONS = """\
Hindsight is your memory of earlier tasks: short lessons about what worked and what failed.
Before a task that resembles earlier work, call search_memory and follow the lessons whose
trigger matches. When a recalled lesson helped (or misled you), call update_memory_usage with
its id. When you learn something reusable, call write_memory with one short lesson; when a
recalled lesson proved wrong, call supersede_memory with the corrected one. At the end of a
task, reflect_task can distill lessons from the whole run. search_memory also finds the
lessons other agents share with you (each hit names its namespace): use them and give
feedback on them, but they are read-only: write a corrected lesson of your own instead."""

Text = Annotated[str, Field(max_length=MAX_TEXT)]
RecordId = Annotated[str, Field(min_length=1, max_length=100, description="A record id (UUID).")]


def _tool_error(exc: HindsightError) -> ToolError:
    """Our error as a tool error whose message names the field."""
    message = str(exc)
    if isinstance(exc, ValidationError) and exc.field and exc.field not in message:
        message = f"{exc.field}: {message}"
    elif isinstance(exc, NotFoundError) and "id" not in message:
        message = f"id: {message}"
    elif isinstance(exc, DatabaseError):
        message = f"memory database unavailable: {message}"
    return ToolError(message)


async def _call(awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except DatabaseBusyError as exc:  # not the tool's failure: busy, retry (``_busy.py``)
        raise busy_error(exc) from None
    except HindsightError as exc:
        raise _tool_error(exc) from None


def build_server(
    memory: AsyncMemory | PendingMemory,
    *,
    require_token: bool = False,
    name: str = "hindsight",
    warmup: Warmup | None = None,
    grant: Grant | None = None,
) -> MCPServer:
    """Build the MCP server on one :class:`AsyncMemory` (its pool serves every tenant).

    Args:
        memory: the memory; its ``namespace`` is used when the request names none
            (stdio, or HTTP with no tokens configured). A :class:`PendingMemory` is
            started when the server starts serving, and each call waits for it.
        require_token: refuse tool calls that did not come through the bearer
            middleware (set for the HTTP transport with tokens).
        name: the server name announced to clients.
        warmup: the background start-up of the model and database, reported by
            ``/healthz`` (the server answers while they load).
        grant: what a request that names none may do (stdio, or HTTP with no
            tokens): default, write and read ``memory.namespace`` only.
    """
    default = grant or Grant(memory.namespace)

    def caller() -> Grant:
        found = CURRENT_GRANT.get()
        if found is None:
            if require_token:
                raise ToolError("unauthorized: no namespace for this request")
            return default
        return found

    def namespace() -> Namespace:
        return caller().write

    async def ready() -> AsyncMemory:
        return await memory.get() if isinstance(memory, PendingMemory) else memory

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        if isinstance(memory, PendingMemory):
            memory.start()
        try:
            yield
        finally:
            await memory.aclose()

    mcp = MCPServer(
        name,
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        lifespan=lifespan,
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def tool(**options: Any) -> Callable[[F], F]:
        """``mcp.tool`` with the docstring, dedented, as the description."""

        def register(fn: F) -> F:
            mcp.tool(description=inspect.cleandoc(fn.__doc__ or ""), **options)(fn)
            return fn

        return register

    @tool(annotations=read_only)
    async def search_memory(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description="What you are about to do, in a sentence.",
            ),
        ],
        scene: Annotated[
            str | None, Field(max_length=MAX_LABEL_CHARS, description="Only lessons of this scene.")
        ] = None,
        top_k: Annotated[
            int,
            # Bounds checked by the core (one limit, one message); advertised here.
            Field(json_schema_extra={"minimum": 1, "maximum": MAX_TOP_K}),
        ] = 5,
        namespaces: Annotated[
            list[Annotated[str, Field(max_length=2000)]] | None,
            Field(
                max_length=100,
                description="Only these of the namespaces you may read ('acme/shared', or "
                "'acme/*' for a prefix and all under it). Default: all of them.",
            ),
        ] = None,
    ) -> SearchResult:
        """Recall lessons from earlier tasks. Call this BEFORE starting a task that resembles
        earlier work, and follow the lessons whose trigger matches. Returns the lesson, its
        trigger, scene, id (for update_memory_usage), score and namespace: your own lessons
        and those shared with you. If memory is unavailable it returns no results and a
        warning: carry on without it."""
        who = caller()
        scope = _sharing.search_scope(who, namespaces)
        mem = await _call(ready())
        if scope == [who.write]:  # one namespace: the single-tenant search, as ever
            recall = mem.recall(query, namespace=who.write, scene=scene, top_k=top_k)
        else:
            recall = mem.recall(query, namespaces=scope, scene=scene, top_k=top_k)
        result = await _call(recall)
        return SearchResult(
            results=[
                MemoryHit(**{**h.compact(), "namespace": show(h.record.namespace)})
                for h in result.hits
            ],
            warning=result.warning,
        )

    @tool()
    async def write_memory(
        scene: Annotated[str, Field(max_length=100, description="Short tag, e.g. file-cleanup.")],
        trigger: Annotated[Text, Field(description="When this lesson applies.")],
        action: Annotated[Text, Field(description="What was done.")],
        outcome: Annotated[Text, Field(description="What happened: success/failure + figures.")],
        lesson: Annotated[Text, Field(description="One actionable sentence (about 50 chars).")],
        importance: Annotated[float | None, Field(ge=0, le=1)] = None,
        critical: Annotated[bool, Field(description="Never decays (rare, vital lessons).")] = False,
    ) -> WriteOutcome:
        """Call when you have just learned something reusable (a mistake fixed, a trick that
        worked) to store it as one short lesson. A near-duplicate of an existing lesson is
        merged into it (status 'merged') instead of being stored twice."""
        record = {
            "scene": scene,
            "trigger": trigger,
            "action": action,
            "outcome": outcome,
            "lesson": lesson,
            "importance": importance,
            "critical": critical,
            "source": {"tool": "mcp"},
        }
        mem = await _call(ready())
        result = await _call(mem.write(record, namespace=namespace()))
        return WriteOutcome(id=str(result.id), status=result.status, similarity=result.similarity)

    @tool(annotations=ToolAnnotations(idempotent_hint=False, open_world_hint=False))
    async def update_memory_usage(id: RecordId, helpful: bool = True) -> UsageOutcome:
        """Give feedback on a recalled lesson after you used it: helpful=true reinforces it,
        helpful=false lets it fade. Call once per lesson per task, with the id from
        search_memory (a lesson shared with you too: your feedback is recorded as yours)."""
        who = caller()
        mem = await _call(ready())
        ns = await _call(_sharing.holder(mem, who, id))
        record = await _call(mem.mark_used(id, helpful, namespace=ns, by=who.label))
        return UsageOutcome(
            id=str(record.id), helpful=helpful, score=record.score, use_count=record.use_count
        )

    @tool(annotations=ToolAnnotations(idempotent_hint=False, open_world_hint=False))
    async def supersede_memory(
        id: RecordId,
        lesson: Annotated[Text, Field(description="The corrected lesson, one sentence.")],
        reason: Annotated[Text, Field(description="Why the old lesson was wrong.")],
        trigger: Annotated[Text | None, Field(description="Default: the old one's.")] = None,
    ) -> SupersedeOutcome:
        """Call when a recalled lesson proved wrong or outdated: the corrected lesson becomes
        its new version (recalled from now on); the old one is kept in its history with
        your reason. Prefer this to forget_memory for a lesson that needs correcting."""
        who = caller()
        record: dict[str, Any] = {"lesson": lesson, "source": {"tool": "mcp"}}
        if trigger is not None:  # else the old version's, as its scene, action, outcome
            record["trigger"] = trigger
        mem = await _call(ready())
        ns = await _call(_sharing.writable(mem, who, id, "superseded"))
        # The actor is the token's label (its name, or mcp:<namespace>): a token is a secret.
        result = await _call(
            mem.supersede(id, record, reason=reason, actor=who.label, namespace=ns)
        )
        return SupersedeOutcome(id=str(result.id), supersedes=str(result.supersedes))

    @tool(annotations=read_only)
    async def memory_history(id: RecordId) -> HistoryOut:
        """Call to see how a lesson changed: every version, oldest first, from the id of any of
        them, and when, why and by whom each version was replaced."""
        mem = await _call(ready())
        ns = await _call(_sharing.holder(mem, caller(), id))
        chain = await _call(mem.history(id, namespace=ns))
        return HistoryOut(
            versions=[
                VersionOut(
                    id=str(r.id),
                    version=r.version,
                    lesson=r.lesson,
                    trigger=r.trigger,
                    current=r.superseded_by is None,
                    superseded_at=r.superseded_at.isoformat() if r.superseded_at else None,
                    superseded_reason=r.superseded_reason,
                    superseded_actor=r.superseded_actor,
                )
                for r in chain
            ]
        )

    @tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def forget_memory(id: RecordId) -> ForgetOutcome:
        """Delete a lesson for good. Call only when a lesson is wrong or the user asks to
        forget it; for lessons that merely did not help, use update_memory_usage(helpful=false)."""
        mem = await _call(ready())
        ns = await _call(_sharing.writable(mem, caller(), id, "forgotten"))
        await _call(mem.forget(id, namespace=ns))
        return ForgetOutcome(id=id)

    @tool()
    async def reflect_task(trajectory: TrajectoryIn) -> ReflectOutcome:
        """Call once when a task has ended (not every turn): pass the goal, the steps (thoughts,
        tool calls, results, errors), the outcome and which recalled lesson ids were used. The
        run is distilled into 0-3 short lessons, which are stored (near-duplicates merged)."""
        mem = await _call(ready())
        return await _call(_reflect.reflect(mem, trajectory, namespace()))

    @tool()
    async def review_task(
        goal: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)],
        outcome: Literal["success", "failure", "partial", "unknown"],
        recalled: Annotated[
            list[RecordId], Field(max_length=200, description="Ids shown to the agent.")
        ],
        used: Annotated[list[RecordId], Field(max_length=200, description="Ids that helped.")] = [],  # noqa: B006
        scene: Annotated[str | None, Field(max_length=100)] = None,
    ) -> ReviewOutcome:
        """Call after a task in which lessons were recalled: lessons that were used are
        reinforced, recalled-but-unused ones decay (shared ones too, as your feedback); with
        an LLM configured, near-duplicate lessons of your own are also merged into one more
        general lesson."""
        trajectory = TrajectoryIn(
            goal=goal, outcome=outcome, recalled=recalled, used=used, scene=scene
        )
        who = caller()
        mem = await _call(ready())
        own, shared = await _call(_sharing.shared_feedback(mem, who, trajectory))
        result = await _call(_reflect.review(mem, own, who.write))
        if shared:
            result.detail["shared_feedback"] = shared
        return result

    @mcp.resource(
        "memory://stats",
        name="stats",
        mime_type="application/json",
        description="Record counts of your namespace, by scene, and the model.",
    )
    async def stats() -> str:
        who = caller()
        ns = who.write
        try:
            s = await (await ready()).stats(namespace=ns)
        except HindsightError as exc:
            # ResourceError: the client gets our message (e.g. "memory database
            # unavailable: ..."), the log one line; anything else is a crash to the SDK
            # (a generic message and a traceback).
            raise ResourceError(str(_tool_error(exc))) from None
        out = StatsOut(
            namespace=list(ns),
            reads=[show(p) for p in who.read],
            records=s.records,
            archived=s.archived,
            scenes=s.scenes,
            embedding_model=s.embedding_model,
            embedding_dim=s.embedding_dim,
        )
        return json.dumps(out.model_dump(mode="json"), ensure_ascii=False)

    # The SDK's custom_route has no return annotation: mypy would see healthz untyped.
    @mcp.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def healthz(_request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok", "server": name, **(warmup.status() if warmup else {})})

    return mcp
