"""HindsightCheckpointer vs LangGraph's PostgresSaver on the same PostgreSQL, one run.

Both savers write the same checkpoints (a "messages" channel stored as a blob, a
"step" channel inline, metadata like a real run's) to their own tables in one
database. Operations: ``put`` (new checkpoint, parent chained), ``get_tuple``
(latest of a thread), ``get_tuple`` by id, ``list`` (10 newest of a thread), and
``put_writes``. Each round runs every operation in four quarters, PostgresSaver and
ours in the order A B B A (B A A B in the next round), so that load on the machine
and the order of back-to-back runs hit both alike; the reported figure is the median
of the rounds.

Usage::

    python bench/bench_langgraph_checkpointer.py [--rounds 7] [--ops 200] [--async]

Uses ``HINDSIGHT_DATABASE_URL`` if set, else starts a throw-away embedded
PostgreSQL. Prints a table and writes ``bench/results/langgraph_checkpointer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6

sys.path.insert(0, str(Path(__file__).parent))
from _common import abba

OPS = ("put", "put_writes", "get_latest", "get_by_id", "list10")


def _checkpoint(
    saver: BaseCheckpointSaver[Any], i: int, version: Any
) -> tuple[Checkpoint, ChannelVersions]:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    messages = [
        {"role": "user" if j % 2 else "assistant", "content": f"message {j} of step {i}"}
        for j in range(8)
    ]
    cp["channel_values"] = {"messages": messages, "step": i}
    cp["channel_versions"] = {"messages": version, "step": version}
    return cp, {"messages": version, "step": version}


class Workload:
    """One thread per saver; each round appends ``ops`` checkpoints and reads them."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.thread = uuid.uuid4().hex
        self.config: RunnableConfig = {
            "configurable": {"thread_id": self.thread, "checkpoint_ns": ""}
        }
        self.version: Any = None
        self.ids: list[RunnableConfig] = []
        self.step = 0

    def run(self, op: str, n: int) -> tuple[float, float]:
        s = self.saver
        t0, c0 = time.perf_counter(), time.process_time()
        if op == "put":
            for _ in range(n):
                self.version = s.get_next_version(self.version, None)
                cp, versions = _checkpoint(s, self.step, self.version)
                meta: CheckpointMetadata = {
                    "source": "loop",
                    "step": self.step,
                    "parents": {},
                    "run_id": "r1",
                }
                self.config = s.put(self.config, cp, meta, versions)
                self.ids.append(self.config)
                self.step += 1
        elif op == "put_writes":
            for i in range(n):
                s.put_writes(
                    self.ids[i % len(self.ids)],
                    [("messages", {"k": i}), ("step", i)],
                    uuid.uuid4().hex,
                )
        elif op == "get_latest":
            latest: RunnableConfig = {
                "configurable": {"thread_id": self.thread, "checkpoint_ns": ""}
            }
            for _ in range(n):
                assert s.get_tuple(latest) is not None
        elif op == "get_by_id":
            for i in range(n):
                assert s.get_tuple(self.ids[-1 - i % len(self.ids)]) is not None
        elif op == "list10":
            for _ in range(n):
                assert (
                    len(list(s.list({"configurable": {"thread_id": self.thread}}, limit=10))) == 10
                )
        return n / (time.perf_counter() - t0), 1e6 * (time.process_time() - c0) / n


class AsyncWorkload(Workload):
    async def arun(self, op: str, n: int) -> tuple[float, float]:
        s = self.saver
        t0, c0 = time.perf_counter(), time.process_time()
        if op == "put":
            for _ in range(n):
                self.version = s.get_next_version(self.version, None)
                cp, versions = _checkpoint(s, self.step, self.version)
                meta: CheckpointMetadata = {
                    "source": "loop",
                    "step": self.step,
                    "parents": {},
                    "run_id": "r1",
                }
                self.config = await s.aput(self.config, cp, meta, versions)
                self.ids.append(self.config)
                self.step += 1
        elif op == "put_writes":
            for i in range(n):
                await s.aput_writes(
                    self.ids[i % len(self.ids)],
                    [("messages", {"k": i}), ("step", i)],
                    uuid.uuid4().hex,
                )
        elif op == "get_latest":
            latest: RunnableConfig = {
                "configurable": {"thread_id": self.thread, "checkpoint_ns": ""}
            }
            for _ in range(n):
                assert await s.aget_tuple(latest) is not None
        elif op == "get_by_id":
            for i in range(n):
                assert await s.aget_tuple(self.ids[-1 - i % len(self.ids)]) is not None
        elif op == "list10":
            for _ in range(n):
                got = [
                    t async for t in s.alist({"configurable": {"thread_id": self.thread}}, limit=10)
                ]
                assert len(got) == 10
        return n / (time.perf_counter() - t0), 1e6 * (time.process_time() - c0) / n


Samples = dict[str, dict[str, list[tuple[float, float]]]]
NAMES = ("pg", "hs")


def _add_round(results: Samples, op: str, round_: int, quarters: list[tuple[float, float]]) -> None:
    """One round's figure per saver from its two quarters (same op count each):
    ops/s over both, CPU per op averaged."""
    for i, name in enumerate(NAMES):
        mine = [q for q, who in zip(quarters, abba(round_), strict=True) if who == i]
        rate = len(mine) / sum(1 / ops_s for ops_s, _ in mine)
        results[name].setdefault(op, []).append((rate, statistics.fmean(c for _, c in mine)))


def _table(title: str, results: Samples) -> dict[str, Any]:
    print(f"\n{title}")
    print(
        f"{'operation':<12}{'PostgresSaver ops/s':>21}{'Hindsight ops/s':>17}{'ratio':>7}"
        f"{'client CPU us/op (PG / ours)':>31}"
    )
    out: dict[str, Any] = {}
    for op in OPS:
        pg = statistics.median(r[0] for r in results["pg"][op])
        hs = statistics.median(r[0] for r in results["hs"][op])
        pg_cpu = statistics.median(r[1] for r in results["pg"][op])
        hs_cpu = statistics.median(r[1] for r in results["hs"][op])
        # Time ratio ours / theirs (<= 1.0: no slower), paired per round: the two
        # savers' runs of a round are back to back, so load drift cancels out.
        ratio = statistics.median(
            p[0] / h[0] for p, h in zip(results["pg"][op], results["hs"][op], strict=True)
        )
        out[op] = {
            "postgres_saver_ops_s": round(pg, 1),
            "hindsight_ops_s": round(hs, 1),
            "time_ratio": round(ratio, 3),
            "postgres_saver_cpu_us": round(pg_cpu),
            "hindsight_cpu_us": round(hs_cpu),
        }
        print(f"{op:<12}{pg:>21.0f}{hs:>17.0f}{ratio:>7.2f}{pg_cpu:>20.0f} / {hs_cpu:.0f}")
    print(
        "ratio = Hindsight time per op / PostgresSaver time per op, median of the "
        "per-round ratios (<= 1.0: no slower)"
    )
    return out


def bench_sync(url: str, rounds: int, ops: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from hindsight_adapters.langgraph import HindsightCheckpointer

    results: Samples = {"pg": {}, "hs": {}}
    with (
        PostgresSaver.from_conn_string(_libpq(url)) as pg_saver,
        HindsightCheckpointer.from_conn_string(url) as hs_saver,
    ):
        pg_saver.setup()
        hs_saver.setup()
        loads = {"pg": Workload(pg_saver), "hs": Workload(hs_saver)}
        for w in loads.values():  # warm up: connections, statement caches
            for op in OPS:
                w.run(op, 20)
        for r in range(rounds):
            for op in OPS:
                quarters = [loads[NAMES[i]].run(op, ops // 2) for i in abba(r)]
                _add_round(results, op, r, quarters)
    return _table("sync", results)


async def bench_async(url: str, rounds: int, ops: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from hindsight_adapters.langgraph import HindsightCheckpointer

    results: Samples = {"pg": {}, "hs": {}}
    async with (
        AsyncPostgresSaver.from_conn_string(_libpq(url)) as pg_saver,
        HindsightCheckpointer.afrom_conn_string(url) as hs_saver,
    ):
        await pg_saver.setup()
        await hs_saver.asetup()
        loads = {"pg": AsyncWorkload(pg_saver), "hs": AsyncWorkload(hs_saver)}
        for w in loads.values():
            for op in OPS:
                await w.arun(op, 20)
        for r in range(rounds):
            for op in OPS:
                quarters = [await loads[NAMES[i]].arun(op, ops // 2) for i in abba(r)]
                _add_round(results, op, r, quarters)
    return _table("async", results)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _with_database(fn: Callable[[str], None]) -> None:
    url = os.environ.get("HINDSIGHT_DATABASE_URL")
    if url:
        fn(url)
        return
    from hindsight_core.storage import embedded

    home = Path(tempfile.mkdtemp(prefix="hindsight-bench-"))
    try:
        fn(embedded.embedded_url(home))
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument(
        "--async", dest="run_async", action="store_true", help="also run the async savers"
    )
    args = parser.parse_args()

    def run(url: str) -> None:
        report: dict[str, Any] = {
            "rounds": args.rounds,
            "ops_per_round": args.ops,
            "sync": bench_sync(url, args.rounds, args.ops),
        }
        if args.run_async:
            report["async"] = asyncio.run(bench_async(url, args.rounds, args.ops))
        out = Path(__file__).parent / "results" / "langgraph_checkpointer.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {out}")

    _with_database(run)


if __name__ == "__main__":
    main()
