"""``hindsight demo``: the point of the project in under a minute, offline.

A file-cleanup agent is asked to tidy a downloads folder. On its first run it
trusts the dates in file names, deletes a dependency package that a project
needs, breaks the build, and fixes it. Looking back at the run (hindsight), a
lesson is distilled and stored. A second, differently worded task recalls that
lesson, and the agent checks extensions instead of dates. Finally the same
lesson, worded again, merges into the stored one instead of adding a row.

The agent is a small deterministic policy (no LLM is needed); the reflection step
uses the configured LLM when ``HINDSIGHT_LLM_*`` is set, else the rule-based
distiller, and says which.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .memory import Memory
from .reflection import Reflector, Step, Trajectory, llm_from_settings

Say = Callable[[str], None]

FILES = {
    "vscode-setup-2023-08-14.exe": "installer",
    "zoom-installer-2023-10-02.msi": "installer",
    "protobuf-2023-09-30.tar.gz": "dependency of ~/project (requirements.txt)",
    "notes-2024-01-15.md": "notes",
}
INSTALLER_EXTENSIONS = (".exe", ".msi", ".dmg", ".pkg")
DATED = re.compile(r"\d{4}-\d{2}-\d{2}")
SCENE = "file-cleanup"


@dataclass
class Run:
    """What one run of the cleanup agent did."""

    deleted: list[str] = field(default_factory=list)
    broke_build: bool = False
    steps: list[Step] = field(default_factory=list)


def _make_downloads() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="hindsight-demo-downloads-"))
    for name, kind in FILES.items():
        (folder / name).write_text(kind)
    return folder


def _build_ok(folder: Path) -> bool:
    return (folder / "protobuf-2023-09-30.tar.gz").exists()


def run_agent(task: str, lessons: list[str], say: Say) -> Run:
    """The cleanup agent: selects by date unless a recalled lesson says otherwise.

    Its one tool, ``delete_files(match_by=...)``, deletes the selected files, runs the
    project's build as a safety check, and restores the files if the build breaks.
    """
    folder = _make_downloads()
    run = Run()
    careful = any("extension" in lesson.lower() or "扩展名" in lesson for lesson in lessons)
    attempts = ["extension"] if careful else ["date", "extension"]
    say(f"    files  {', '.join(sorted(FILES))}")
    for match_by in attempts:
        chosen = [n for n in sorted(FILES) if _selected(n, match_by)]
        run.steps.append(Step(kind="tool_call", tool="delete_files", args={"match_by": match_by}))
        for name in chosen:
            (folder / name).unlink()
        say(f"    delete_files(match_by={match_by!r}) -> {', '.join(chosen)}")
        if _build_ok(folder):
            run.deleted = chosen
            run.steps.append(
                Step(
                    kind="tool_result",
                    tool="delete_files",
                    content=f"deleted {len(chosen)} files; build passed",
                )
            )
            say("    build  passed")
            return run
        run.broke_build = True
        error = "build failed: ~/project needs protobuf-2023-09-30.tar.gz; files restored"
        for name in chosen:
            (folder / name).write_text(FILES[name])
        run.steps.append(Step(kind="error", tool="delete_files", content=error))
        run.steps.append(
            Step(
                kind="thought",
                content="A date in the name does not make a "
                "file an old installer; select by extension instead.",
            )
        )
        say(f"    build  FAILED ({error})")
    return run


def _selected(name: str, match_by: str) -> bool:
    if match_by == "extension":
        return name.endswith(INSTALLER_EXTENSIONS)
    return bool(DATED.search(name)) and not name.endswith(".md")  # dated, not a document


def run_demo(say: Say, memory: Memory | None = None, *, keep: bool = False) -> dict[str, object]:
    """Run the whole story; returns the figures it printed (used by the tests).

    The story runs in a fresh namespace (``demo/<hex>``), dropped at the end unless
    ``keep``: the demo leaves nothing in the user's store.
    """
    namespace = ("demo", uuid.uuid4().hex[:8])  # a fresh one per run: the story starts empty
    mem = memory or Memory(namespace)
    try:
        summary = _story(say, mem, namespace)
    finally:
        if not keep:
            mem.drop_namespace(namespace)
    if keep:
        say(f"Kept the demo's lessons in namespace {'/'.join(namespace)}.")
    return {**summary, "kept": keep}


def _story(say: Say, mem: Memory, namespace: tuple[str, str]) -> dict[str, object]:
    llm = llm_from_settings(mem.settings)
    reflector = Reflector(mem, llm=llm)

    say("[1/4] First run — task: 'Clean up my Downloads folder: delete old installers.'")
    say("      (no lessons stored yet)")
    first = run_agent("Clean up my Downloads folder: delete old installers.", [], say)

    distiller = f"LLM {llm.model_name}" if llm else "the rule-based distiller (no LLM configured)"
    say(f"[2/4] Hindsight — looking back at the run with {distiller}")
    trajectory = Trajectory(
        goal="Clean up my Downloads folder: delete old installers.",
        steps=first.steps,
        outcome="partial",
        final_state="build fixed after restoring a deleted dependency",
        scene=SCENE,
        source={"agent": "demo-cleanup-agent", "task": "cleanup-1"},
    )
    result = reflector.reflect(trajectory, namespace=namespace)
    for w in result.written:
        record = mem.get(w.id, namespace=namespace)
        say(f'      lesson {w.status}: "{record.lesson}"')
        say(f"      when: {record.trigger}")
    if not result.written:
        say(f"      no lesson written ({result.error or 'nothing new to learn'})")

    task2 = "Free up disk space: get rid of stale setup files in ~/Downloads."
    say(f"[3/4] Second run, worded differently — task: '{task2}'")
    hits = mem.search(task2, namespace=namespace, scene=SCENE, top_k=3)
    for h in hits:
        b = h.breakdown
        say(
            f'      recalled "{h.record.lesson}" (score {h.score:.2f}: semantic '
            f"{b.semantic:.2f}, keyword {b.keyword:.2f}, decay {b.decay:.2f})"
        )
    second = run_agent(task2, [h.record.lesson for h in hits], say)
    for h in hits:
        mem.mark_used(h.record.id, helpful=not second.broke_build, namespace=namespace)

    say("[4/4] The same lesson, learned again in other words, merges instead of adding a row")
    before = mem.stats(namespace=namespace).records
    merged = None
    if result.written:
        original = mem.get(result.written[0].id, namespace=namespace)
        paraphrase = _reword(original.lesson)
        again = mem.write(
            {
                "scene": SCENE,
                "trigger": original.trigger,
                "lesson": paraphrase,
                "outcome": "failure",
            },
            namespace=namespace,
        )
        merged = again
        after_record = mem.get(again.id, namespace=namespace)
        say(
            f'      wrote "{paraphrase}" -> {again.status} '
            f"(similarity {again.similarity}); occurrences now {after_record.occurrences}"
        )
    after = mem.stats(namespace=namespace).records
    say(f"      records in the namespace: {before} before, {after} after")
    outcome = "avoided the mistake" if not second.broke_build else "repeated the mistake"
    say(f"Done: the first run broke the build; the second run {outcome}.")
    return {
        "namespace": namespace,
        "first_broke_build": first.broke_build,
        "second_broke_build": second.broke_build,
        "lessons": len(result.written),
        "recalled": len(hits),
        "merged": merged.status if merged else None,
        "records_before": before,
        "records_after": after,
    }


def _reword(lesson: str) -> str:
    """A paraphrase of a lesson, as a later run might distil it again."""
    for old, new in (("When calling ", "With "), ("Check", "Verify"), ("check", "verify")):
        if old in lesson:
            return lesson.replace(old, new, 1)
    return lesson.rstrip(".") + "."
