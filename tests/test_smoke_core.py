"""Smoke: write, merge, search in sync and async."""

from hindsight_core import AsyncMemory, Memory


def test_write_merge_search(memory: Memory) -> None:
    first = memory.write(
        {
            "scene": "file-cleanup",
            "trigger": "cleaning downloads",
            "lesson": "Check the extension before deleting files",
        }
    )
    again = memory.write(
        {
            "scene": "file-cleanup",
            "trigger": "cleaning downloads",
            "lesson": "Check file extensions before deleting files",
        }
    )
    assert first.status == "inserted"
    assert again.status == "merged" and again.id == first.id
    hits = memory.search("remove old installers from the downloads folder")
    assert hits[0].record.id == first.id
    assert hits[0].record.occurrences == 2


async def test_async_write_search(amemory: AsyncMemory) -> None:
    res = await amemory.write({"trigger": "calling a flaky API", "lesson": "Retry with backoff"})
    hits = await amemory.search("the API sometimes fails")
    assert hits and hits[0].record.id == res.id
