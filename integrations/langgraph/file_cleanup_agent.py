"""A file-cleanup agent that learns from its mistake (LangGraph + Hindsight).

The agent is a real ``StateGraph``: recall -> agent <-> tools (a ``ToolNode`` over a
temporary directory) -> reflect -> END, checkpointed by ``HindsightCheckpointer``.

- Run 1: asked to delete old dated files, the agent also deletes
  ``node-v20.11.0-2024-01-15.tar.gz`` -- a dependency ``package.json`` needs -- and
  the project check fails. The reflection node distills the run into a lesson.
- Run 2 (a fresh copy of the directory): the recall node puts the lesson in the
  system prompt; the agent reads ``package.json`` first, keeps the package, and the
  check passes.

Offline by default: the chat model is scripted, but it really reads its prompt
(its behaviour changes only because the lesson is there), and the distiller is a
scripted LLM. With ``HINDSIGHT_LLM_BASE_URL`` and ``HINDSIGHT_LLM_MODEL`` set (and
``langchain-openai`` installed) both are that OpenAI-compatible model instead.

Run: ``python integrations/langgraph/file_cleanup_agent.py``
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from hindsight_adapters.langgraph import HindsightCheckpointer, LangChainLLM
from hindsight_adapters.langgraph.recall import MEMORY_HEADER, recall_node
from hindsight_adapters.langgraph.reflection import reflection_node
from hindsight_core import Memory, Settings
from hindsight_core.reflection import LLM, ScriptedLLM

TASK = (
    "Clean up the project directory: delete old dated files (logs, downloads, "
    "temporary files) to free disk space, then run check_project."
)
PACKAGE = "node-v20.11.0-2024-01-15.tar.gz"
DATED = re.compile(r"\d{4}-\d{2}-\d{2}")
SYSTEM = (
    "You are a careful file-cleanup agent. Use the tools; finish with a short "
    "summary of what you deleted."
)


def make_project(root: Path) -> Path:
    """A small project directory with old junk and one dated file that is needed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.log.2023-11-02").write_text("old log\n")
    (root / "download-2023-12-24.zip").write_text("old download\n")
    (root / "cache.tmp").write_text("tmp\n")
    (root / PACKAGE).write_text("pretend tarball\n")
    (root / "package.json").write_text(
        json.dumps({"name": "demo", "dependencies": {"node": f"file:./{PACKAGE}"}}, indent=2)
    )
    return root


def make_tools(root: Path) -> list[BaseTool]:
    """Tools confined to ``root``."""

    def _path(name: str) -> Path:
        path = (root / name).resolve()
        if path.parent != root.resolve():
            raise ValueError(f"{name!r} is outside the project directory")
        return path

    @tool
    def list_files() -> str:
        """List the files in the project directory."""
        return "\n".join(sorted(p.name for p in root.iterdir()))

    @tool
    def read_file(name: str) -> str:
        """Read a text file of the project directory."""
        return _path(name).read_text()

    @tool
    def delete_file(name: str) -> str:
        """Delete one file of the project directory."""
        _path(name).unlink()
        return f"deleted {name}"

    @tool
    def check_project() -> str:
        """Check that the project still builds (its dependencies are present)."""
        deps = json.loads((root / "package.json").read_text()).get("dependencies", {})
        for spec in deps.values():
            if spec.startswith("file:./") and not (root / spec[7:]).exists():
                raise RuntimeError(
                    f"build failed: dependency {spec[7:]} required by package.json is missing"
                )
        return "ok: the project builds"

    return [list_files, read_file, delete_file, check_project]


class ScriptedCleanupModel(BaseChatModel):
    """An offline stand-in for a chat model that reads its prompt.

    It lists the files, deletes those with a date in the name (and ``.tmp``), runs
    the check and summarizes. If the prompt holds lessons from memory that mention
    ``package.json``, it reads ``package.json`` first and keeps every file it names.
    """

    @property
    def _llm_type(self) -> str:
        return "scripted-cleanup"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedCleanupModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        lessons = "\n".join(
            str(m.content)
            for m in messages
            if isinstance(m, SystemMessage) and str(m.content).startswith(MEMORY_HEADER)
        )
        careful = "package.json" in lessons.lower()
        results = {m.name: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        if "list_files" not in results:
            return _call("list_files", {})
        if careful and "read_file" not in results:
            return _call("read_file", {"name": "package.json"})
        if "delete_file" not in results and "check_project" not in results:
            needed = results.get("read_file", "")
            doomed = [
                f
                for f in results["list_files"].splitlines()
                if (DATED.search(f) or f.endswith(".tmp")) and f not in needed
            ]
            return AIMessage(
                content="Deleting old dated files.",
                tool_calls=[
                    {"name": "delete_file", "args": {"name": f}, "id": _id()} for f in doomed
                ],
            )
        if "check_project" not in results:
            return _call("check_project", {})
        deleted = [
            str(m.content)[8:]
            for m in messages
            if isinstance(m, ToolMessage) and m.name == "delete_file"
        ]
        return AIMessage(content=f"Deleted {', '.join(deleted)}. Check: {results['check_project']}")


def _id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": _id()}])


# The distiller's answer when running offline (a real model writes its own).
SCRIPTED_LESSON = json.dumps(
    {
        "records": [
            {
                "scene": "file-cleanup",
                "trigger": "cleaning up old dated files in a project directory",
                "action": f"deleted every dated file, including {PACKAGE}; check_project failed",
                "outcome": "failure: a dependency package listed in package.json was deleted",
                "lesson": "Check package.json before deleting packages",
                "confidence": 0.9,
                # The steps it draws on (the deletion and the failed check) and their words:
                # the reflection screen drops a lesson that cites nothing in the run.
                "steps": [8, 14],
                "evidence": (
                    "dependency node-v20.11.0-2024-01-15.tar.gz required by package.json is missing"
                ),
            }
        ]
    }
)


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def build_graph(
    chat_model: BaseChatModel,
    tools: list[BaseTool],
    memory: Memory,
    checkpointer: HindsightCheckpointer,
    reflection_llm: LLM | None,
) -> tuple[Any, Any]:
    """recall -> agent <-> tools -> reflect -> END; returns the graph and the reflect node."""
    model = chat_model.bind_tools(tools)
    reflect = reflection_node(memory, llm=reflection_llm, scene="file-cleanup")

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    def route(state: State) -> str:
        return "tools" if tools_condition(state) == "tools" else "reflect"

    g = StateGraph(State)
    g.add_node("recall", recall_node(memory, top_k=3, scene="file-cleanup"))
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    g.add_node("reflect", reflect)
    g.add_edge(START, "recall")
    g.add_edge("recall", "agent")
    g.add_conditional_edges("agent", route, ["tools", "reflect"])
    g.add_edge("tools", "agent")
    g.add_edge("reflect", END)
    return g.compile(checkpointer=checkpointer), reflect


def real_models() -> tuple[BaseChatModel, LLM] | None:
    """The configured OpenAI-compatible model (``HINDSIGHT_LLM_*``), if any."""
    settings = Settings()
    if not settings.llm_configured:
        return None
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        print("langchain-openai is not installed; running offline")
        return None
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "none"
    chat = ChatOpenAI(
        base_url=settings.llm_base_url,
        model=settings.llm_model or "",
        api_key=key,
        timeout=settings.llm_timeout,
    )
    return chat, LangChainLLM(chat)


def run_once(
    memory: Memory,
    checkpointer: HindsightCheckpointer,
    root: Path,
    chat_model: BaseChatModel,
    reflection_llm: LLM | None,
) -> dict[str, Any]:
    """One run over a fresh project copy; waits for its reflection."""
    project = make_project(root)
    tools = make_tools(project)
    graph, reflect = build_graph(chat_model, tools, memory, checkpointer, reflection_llm)
    config = {"configurable": {"thread_id": "cleanup-" + uuid.uuid4().hex[:8]}}
    out = graph.invoke({"messages": [HumanMessage(TASK)]}, config)
    reflections = reflect.reflection.wait(timeout=120)  # the demo waits to print them
    reflect.reflection.close()
    tool_msgs = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return {
        "thread_id": config["configurable"]["thread_id"],
        "package_kept": (project / PACKAGE).exists(),
        "check_failed": any(m.name == "check_project" and m.status == "error" for m in tool_msgs),
        "lessons_in_prompt": any(
            isinstance(m, SystemMessage) and str(m.content).startswith(MEMORY_HEADER)
            for m in out["messages"]
        ),
        "answer": str(out["messages"][-1].content),
        "lessons_written": [r["lesson"] for res in reflections for r in res.records],
        "dropped": [d for res in reflections for d in res.dropped],
    }


def run_demo(
    memory: Memory,
    checkpointer: HindsightCheckpointer,
    workdir: Path,
    *,
    chat_model: BaseChatModel | None = None,
    reflection_llm: LLM | None = None,
) -> list[dict[str, Any]]:
    """Run 1 (learns the lesson) and run 2 (uses it). Offline unless models are given."""
    runs = []
    for i in (1, 2):
        model = chat_model or ScriptedCleanupModel()
        llm = reflection_llm or ScriptedLLM([SCRIPTED_LESSON] if i == 1 else ['{"records": []}'])
        runs.append(run_once(memory, checkpointer, workdir / f"run{i}", model, llm))
    return runs


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the example's namespace and threads (default: dropped)",
    )
    args = parser.parse_args(argv)
    # A fresh namespace per demo, so that run 1 starts without the lesson every time;
    # dropped at the end (with the runs' threads) so nothing is left in your store.
    memory = Memory(("examples", "file-cleanup", uuid.uuid4().hex[:8]))
    models = real_models()
    chat, llm = models if models else (None, None)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, HindsightCheckpointer(memory) as checkpointer:
        try:
            runs = run_demo(memory, checkpointer, Path(tmp), chat_model=chat, reflection_llm=llm)
            for i, run in enumerate(runs, start=1):
                print(f"--- run {i} (thread {run['thread_id']})")
                print(f"lessons in prompt: {run['lessons_in_prompt']}")
                print(f"agent: {run['answer']}")
                print(f"{PACKAGE} kept: {run['package_kept']}; check failed: {run['check_failed']}")
                for lesson in run["lessons_written"]:
                    print(f"lesson stored: {lesson}")
                for dropped in run["dropped"]:
                    print(
                        f"lesson dropped: {dropped['record'].get('lesson')} ({dropped['reason']})"
                    )
        finally:
            if args.keep:
                print(f"kept namespace {'/'.join(memory.namespace)}")
            else:
                for run in runs:
                    checkpointer.delete_thread(run["thread_id"])
                memory.drop_namespace(memory.namespace)
    memory.close()


if __name__ == "__main__":
    main()
