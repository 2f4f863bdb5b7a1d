"""`write_many` with dedup, this code against another checkout, batch by batch.

On a shared machine two runs minutes apart differ by more than most changes; here two
processes (one per code version) write to one database and take turns, one batch each,
so both see the same load. Run from the repository root::

    git worktree add /tmp/hs-main main   # or: git archive main | tar -x -C /tmp/hs-main
    nice python bench/bench_writes_ab.py --other /tmp/hs-main --size 10000 --batches 4

Each batch is the one ``bench_recall.py`` times (600 new records, 300 rewordings of
stored ones, 100 of the batch's own); the namespace starts at ``--size`` records and
grows by every batch of both. Prints one JSON line per code version: median rec/s, and
the client's and the embedded server's CPU per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
import _common as c
import bench_recall as br

from hindsight_core import Memory, Settings
from hindsight_core.embeddings.callable import CallableEmbedder

DB = "hindsight_bench_writes_ab"
NS = ("bench", "writes-ab")


def _memory(work: br.Workload, url: str) -> Memory:
    emb = CallableEmbedder(work.lookup, dim=c.DIM, model_name=c.MODEL)
    mem = Memory(NS, settings=Settings(database_url=url), embedder=emb)
    mem.setup()
    return mem


def _analyze(mem: Memory) -> None:
    with mem.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE hindsight_experiences"))


def _server_cpu() -> float:
    """CPU seconds of the embedded server under ``c.HOME`` and its backends."""
    cmd = str(c.HOME)
    found = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] and "-D" in p.info["cmdline"] and cmd in " ".join(p.info["cmdline"])
    ]
    total = 0.0
    for proc in found + [child for p in found for child in p.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _turn(path: Path, me: str) -> None:
    while path.read_text().strip() != me:
        time.sleep(0.02)


def worker(me: str, turn: Path, batches: int) -> None:
    """One code version's batches, each when it is this process's turn."""
    work = br.Workload(seed=int.from_bytes(os.urandom(2), "big"))
    mem = _memory(work, c.database_url(DB))
    other = "1" if me == "0" else "0"
    _turn(turn, me)
    mem.write_many(work.records(1000))  # warm-up; gives the duplicates stored records
    _analyze(mem)
    turn.write_text(other)
    rps, client, server = [], [], []
    for _ in range(batches):
        _turn(turn, me)
        batch = work.dedup_batch()
        s0, c0, t0 = _server_cpu(), time.process_time(), time.perf_counter()
        mem.write_many(batch)
        wall = time.perf_counter() - t0
        client.append(time.process_time() - c0)
        server.append(_server_cpu() - s0)
        rps.append(len(batch) / wall)
        turn.write_text(other)
    mem.close()
    out = {
        "code": os.environ.get("PYTHONPATH", ""),
        "rps_median": round(float(np.median(rps))),
        "runs": [round(x) for x in rps],
        "client_cpu_ms": round(float(np.median(client)) * 1000),
        "server_cpu_ms": round(float(np.median(server)) * 1000),
        "load": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, help="root of the other checkout")
    ap.add_argument("--size", type=int, default=10_000, help="records before the batches")
    ap.add_argument("--batches", type=int, default=4, help="timed batches per version")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--turn", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        worker(args.worker, Path(args.turn), args.batches)
        return
    url, drop = c.fresh_database(DB)
    work = br.Workload(seed=11)
    mem = _memory(work, url)
    stored = 0
    while stored < args.size:
        results = mem.write_many(work.records(min(2000, args.size - stored)))
        stored += sum(r.status == "inserted" for r in results)
        _analyze(mem)
    mem.close()
    turn = Path(c.CACHE) / "writes_ab.turn"
    turn.write_text("0")
    procs = []
    for me, root in (("0", Path(args.other).resolve()), ("1", Path(__file__).parents[1])):
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = [sys.executable, str(root / "bench" / Path(__file__).name)]
        if not (root / "bench" / Path(__file__).name).exists():  # an older checkout
            cmd = [sys.executable, str(Path(__file__).resolve())]
        cmd += ["--other", ".", "--worker", me, "--turn", str(turn), "--batches", str(args.batches)]
        procs.append(subprocess.Popen(cmd, env=env, cwd=root))
    try:
        for p in procs:
            p.wait()
    finally:
        drop()


if __name__ == "__main__":
    main()
