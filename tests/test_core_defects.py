"""Defects of issue 16, each reproduced: scenes kept through dedup, set-up committed on
its own, one embedded text everywhere, recall bounded in time, embedding errors named
as such; and ``reindex`` skipping what is up to date (issue 14).

Internals: ``storage.vectors.Float4Array``, to check that the vector dumper is
registered on our engines only, never on psycopg's global adapters."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hindsight_core import (
    AsyncMemory,
    CallableEmbedder,
    EmbeddingError,
    EmbeddingModelMismatchError,
    ExperienceIn,
    Memory,
    Settings,
)
from hindsight_core.memory.inputs import embedding_text

CLEANUP = {
    "scene": "file-cleanup",
    "trigger": "cleaning the downloads folder",
    "lesson": "Check the extension before deleting files",
}
OTHER = {**CLEANUP, "scene": "other-scene"}


# ------------------------------------------------------------------ 1. scenes


def test_a_lesson_merged_across_scenes_stays_in_its_scene(memory: Memory) -> None:
    first = memory.write(CLEANUP)
    second = memory.write(OTHER)
    assert second.status == "merged" and second.id == first.id
    hits = memory.search("delete old downloads", scene="other-scene")
    assert [h.record.id for h in hits] == [first.id]
    assert hits[0].record.scenes == ["file-cleanup", "other-scene"]
    assert [h.record.id for h in memory.search("delete old downloads", scene="file-cleanup")] == [
        first.id
    ]
    assert memory.search("delete old downloads", scene="code-review") == []
    assert [r.id for r in memory.list_records(scene="other-scene")] == [first.id]
    # a third write under a known scene adds nothing twice
    memory.write(OTHER)
    assert memory.get(first.id).scenes == ["file-cleanup", "other-scene"]


def test_scenes_of_a_batch_merge_and_the_export_round_trip(
    memory: Memory, settings: Settings, embedder, namespace
) -> None:  # type: ignore[no-untyped-def]
    results = memory.write_many([CLEANUP, OTHER])
    assert [r.status for r in results] == ["inserted", "merged"]
    rid = results[0].id
    assert [h.record.id for h in memory.search("delete downloads", scene="other-scene")] == [rid]
    out = io.StringIO()
    memory.export(out)
    (line,) = out.getvalue().splitlines()
    assert json.loads(line)["scenes"] == ["file-cleanup", "other-scene"]
    memory.forget(rid)
    assert memory.import_records([line])["imported"] == 1
    assert memory.get(rid).scenes == ["file-cleanup", "other-scene"]
    assert [h.record.id for h in memory.search("delete downloads", scene="other-scene")] == [rid]


def test_an_edit_to_another_scene_keeps_each_scene_once(memory: Memory) -> None:
    rid = memory.write(CLEANUP).id
    memory.write(OTHER)
    edited = memory.edit(rid, scene="other-scene")
    assert edited.scenes == ["other-scene"]


async def test_scenes_async(amemory: AsyncMemory) -> None:
    first = await amemory.write(CLEANUP)
    assert (await amemory.write(OTHER)).status == "merged"
    hits = await amemory.search("delete old downloads", scene="other-scene")
    assert [h.record.id for h in hits] == [first.id]


# ------------------------------------------------------------------ 2. set-up


def _failing_once(embedder, model_name: str) -> CallableEmbedder:  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def embed(texts: list[str]) -> list[list[float]]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("model server restarting")
        return embedder.embed(texts)

    return CallableEmbedder(embed, dim=384, model_name=model_name)


def test_setup_commits_before_a_failed_first_write(fresh_db: str, embedder) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=fresh_db)
    first = Memory(("s",), settings=settings, embedder=_failing_once(embedder, "model-a"))
    # (an EmbeddingError since defect 5; the point here is what the failure leaves)
    with pytest.raises((EmbeddingError, RuntimeError), match="model server restarting"):
        first.write(CLEANUP)
    other = Memory(
        ("s",),
        settings=settings,
        embedder=CallableEmbedder(embedder.embed, dim=384, model_name="model-b"),
    )
    # The database holds no record: it adopts model-b (issue 26 item 4), and model-a,
    # whose memory was set up on the empty database, is checked again and refused.
    assert other.write(CLEANUP).status == "inserted"
    with pytest.raises(EmbeddingModelMismatchError, match="model-b"):
        first.write(CLEANUP)
    assert first.stats().embedding_model == "model-b"
    first.close()
    other.close()


def test_stats_with_another_model_does_not_make_it_ready(fresh_db: str, embedder) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=fresh_db)
    with Memory(("s",), settings=settings, embedder=embedder) as mem:
        mem.write(CLEANUP)
    other = Memory(
        ("s",),
        settings=settings,
        embedder=CallableEmbedder(embedder.embed, dim=384, model_name="model-b"),
    )
    assert other.stats().records == 1
    with pytest.raises(EmbeddingModelMismatchError):
        other.write(OTHER)
    other.close()


# ------------------------------------------------------------------ 3. + reindex


def test_reindex_embeds_the_text_writes_embed(fresh_db: str, embedder) -> None:  # type: ignore[no-untyped-def]
    record = {**CLEANUP, "lesson": "Check the extension before deleting files."}
    query = embedding_text(ExperienceIn(**record))
    with Memory(("r",), settings=Settings(database_url=fresh_db), embedder=embedder) as mem:
        mem.write(record)
        before = mem.search(query)[0].breakdown.semantic
        report = mem.reindex(force=True)
        assert (report.reembedded, report.skipped) == (1, 0)
        after = mem.search(query)[0].breakdown.semantic
    assert before > 0.9999
    assert after == pytest.approx(before, abs=1e-5)


def test_reindex_skips_records_up_to_date(fresh_db: str, embedder) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=fresh_db)
    seen: list[tuple[int, int]] = []
    with Memory(("r",), settings=settings, embedder=embedder) as mem:
        ids = [
            r.id
            for r in mem.write_many(
                [
                    CLEANUP,
                    {"trigger": "a flaky API", "lesson": "Retry with exponential backoff"},
                    {"trigger": "reviewing a PR", "lesson": "Run the tests before approving"},
                ]
            )
        ]
        report = mem.reindex(progress=lambda done, total: seen.append((done, total)))
        assert (report.reembedded, report.skipped) == (0, 3)
        assert seen[-1] == (3, 3)
        # a new version (docs/versions.md): four records, the old one kept
        edited = mem.edit(ids[0], lesson="Check the file type before deleting")
        assert mem.reindex().reembedded == 0  # the edit embedded the new text already
        assert mem.reindex(force=True).reembedded == 4
    other = CallableEmbedder(embedder.embed, dim=384, model_name="minilm-renamed")
    with Memory(("r",), settings=settings, embedder=other) as mem2:
        report = mem2.reindex()
        assert (report.reembedded, report.skipped) == (4, 0)
        assert mem2.reindex().skipped == 4
        assert mem2.search("delete files")[0].record.id == edited.id


def test_cli_reindex_json_and_force(fresh_db: str, embedder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    import hindsight_adapters.cli.records  # noqa: F401 - registers the command
    from hindsight_adapters.cli import app

    with Memory(("default",), settings=Settings(database_url=fresh_db), embedder=embedder) as m:
        m.write(CLEANUP)
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    runner = CliRunner()
    plain = runner.invoke(app, ["reindex", "--json"])
    assert plain.exit_code == 0, plain.output
    body = json.loads(plain.stdout)
    assert (body["reembedded"], body["skipped"]) == (0, 1)
    forced = runner.invoke(app, ["reindex", "--force", "--json"])
    assert json.loads(forced.stdout)["reembedded"] == 1


# ------------------------------------------------------------------ 4. bounded recall


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"postgresql://u:p@127.0.0.1:{server.getsockname()[1]}/db"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


# Between the recall timeout (1 s) and the connect timeout (20 s): a recall that waits
# for the connection instead of its own bound fails, however busy the machine.
RECALL_BOUND = 10.0


def test_sync_recall_is_bounded_by_the_recall_timeout(silent_server: str, embedder) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=silent_server, recall_timeout=1.0, connect_timeout=20)
    pool = ThreadPoolExecutor(1)
    with Memory(("t",), settings=settings, embedder=embedder) as mem:
        try:
            result = pool.submit(mem.recall, "delete old downloads").result(RECALL_BOUND)
        except TimeoutError:
            pytest.fail(
                f"sync recall still waiting after {RECALL_BOUND} s: not bounded by "
                "HINDSIGHT_RECALL_TIMEOUT (1 s)"
            )
        finally:
            pool.shutdown(wait=False)
    assert result.hits == [] and result.degraded
    assert "recall timed out" in (result.warning or "")  # its own bound, not the connect


async def test_async_recall_is_bounded_by_the_recall_timeout(
    silent_server: str,
    embedder,  # type: ignore[no-untyped-def]
) -> None:
    settings = Settings(database_url=silent_server, recall_timeout=1.0, connect_timeout=20)
    mem = AsyncMemory(("t",), settings=settings, embedder=embedder)
    try:
        result = await asyncio.wait_for(mem.recall("delete old downloads"), RECALL_BOUND)
    except TimeoutError:
        pytest.fail(
            f"async recall still waiting after {RECALL_BOUND} s: not bounded by "
            "HINDSIGHT_RECALL_TIMEOUT (1 s)"
        )
    finally:
        await mem.aclose()
    assert result.hits == [] and result.degraded
    assert "recall timed out" in (result.warning or "")


# ------------------------------------------------------------------ 5. embedding errors


def _broken(exc: Exception) -> CallableEmbedder:
    def embed(texts: list[str]) -> list[list[float]]:
        raise exc

    return CallableEmbedder(embed, dim=384, model_name="all-MiniLM-L6-v2")


def test_an_embedder_failure_is_an_embedding_error(settings: Settings, namespace) -> None:  # type: ignore[no-untyped-def]
    with Memory(
        namespace, settings=settings, embedder=_broken(ConnectionError("connection refused"))
    ) as mem:
        with pytest.raises(EmbeddingError, match="connection refused"):
            mem.search("delete old downloads")
        with pytest.raises(EmbeddingError):
            mem.write(CLEANUP)


def test_recall_degrades_on_any_embedder_failure(settings: Settings, namespace) -> None:  # type: ignore[no-untyped-def]
    with Memory(namespace, settings=settings, embedder=_broken(RuntimeError("CUDA OOM"))) as mem:
        result = mem.recall("delete old downloads")
    assert result.hits == [] and "CUDA OOM" in (result.warning or "")


async def test_async_recall_degrades_on_any_embedder_failure(
    settings: Settings,
    namespace,  # type: ignore[no-untyped-def]
) -> None:
    mem = AsyncMemory(namespace, settings=settings, embedder=_broken(RuntimeError("CUDA OOM")))
    result = await mem.recall("delete old downloads")
    await mem.aclose()
    assert result.hits == [] and "CUDA OOM" in (result.warning or "")


# ------------------------------------------------------------------ 7. smaller ones


def test_recall_node_raises_bad_arguments_and_the_wrong_memory(
    memory: Memory,
    amemory,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from langchain_core.messages import HumanMessage

    from hindsight_adapters.langgraph import recall_node
    from hindsight_core import ConfigurationError, ValidationError

    state = {"messages": [HumanMessage("clean up the downloads folder")]}
    with pytest.raises(ValidationError, match="top_k"):
        recall_node(memory, top_k=0).invoke(state)
    with pytest.raises(ConfigurationError, match="ainvoke"):
        recall_node(amemory).invoke(state)
    with pytest.raises(ConfigurationError, match="Memory or an AsyncMemory"):
        recall_node("memory")  # type: ignore[arg-type]


def test_the_vector_dumper_is_ours_only(settings: Settings, embedder, namespace) -> None:  # type: ignore[no-untyped-def]
    import psycopg
    import sqlalchemy as sa
    from psycopg.adapt import PyFormat

    from hindsight_core.storage.vectors import Float4Array

    with pytest.raises(psycopg.ProgrammingError):
        psycopg.adapters.get_dumper(Float4Array, PyFormat.BINARY)
    # an engine given by the caller still sends vectors
    assert settings.database_url is not None
    engine = sa.create_engine(settings.database_url)
    with Memory(namespace, settings=settings, embedder=embedder, engine=engine) as mem:
        rid = mem.write(CLEANUP).id
        assert mem.search("delete old downloads")[0].record.id == rid
    engine.dispose()


def test_the_inspector_shows_every_scene_of_a_record(
    memory: Memory,
    settings: Settings,  # type: ignore[no-untyped-def]
    embedder,
) -> None:
    pytest.importorskip("starlette", reason="the ui extra is not installed")
    from starlette.testclient import TestClient

    from hindsight_adapters.ui import create_app

    rid = memory.write(CLEANUP).id
    memory.write(OTHER)
    scenes = {s.scene: s.records for s in memory.scenes()}
    assert scenes == {"file-cleanup": 1, "other-scene": 1}
    app = create_app(
        settings=settings, embedder=embedder, namespace=memory.namespace, loopback_only=False
    )
    with TestClient(app) as client:
        page = client.get(f"/records/{rid}")
        assert page.status_code == 200
        assert "other-scene" in page.text and "file-cleanup" in page.text
        listed = client.get("/", params={"scene": "other-scene"})
        assert "Check the extension before deleting files" in listed.text
