"""Load on `structqa serve` over loopback: micro-batching vs one request at a time.

    python benchmarks/bench_serve.py CHECKPOINT                 # every scenario, ~8 min
    python benchmarks/bench_serve.py CHECKPOINT --duration 10   # shorter scenarios
    python benchmarks/bench_serve.py CHECKPOINT --only-ratio    # the rounds at 16 clients
    python benchmarks/bench_serve.py CHECKPOINT --soak 300      # 16 clients for 5 min: RSS
    python benchmarks/bench_serve.py CHECKPOINT --only-ratio --arm "batch-4=--max-batch-windows 4"

Starts `structqa serve CHECKPOINT` as a subprocess on a free loopback port (its context limit
raised to take 1 MB passages) and drives it with closed-loop clients (each sends its next
request when the last is answered) over raw keep-alive HTTP/1.1 connections (asyncio
streams: a few microseconds of client CPU per request, as the client shares the machine).
Questions and passages are SQuAD's held-out split (``splits/squad1-heldout``), each client
starting at its own offset.

Scenarios on the batched server (its default flags): 1, 4, 16 and 64 clients; 15 clients
alone and beside one client that sends 1 MB passages (the other clients' p99 is what must
hold); 16 clients beside 200 slow connections (half trickle their headers, half their body,
a byte a second). Beside it, two baselines, each its own server: one window per forward
pass (``--max-batch-windows 1 --max-wait-ms 0``: still pipelined, tokenizing and decoding
overlap the model) and one request at a time (``--one-at-a-time``: each request tokenized,
scored and decoded whole before the next, as a plain server with one lock), each at 1 client;
then the three at 16 clients in ``--rounds`` rounds, the order reversed each round.
``ratio throughput@16`` is batched / one-request-at-a-time req/s summed over the rounds (so
drift in other load on the machine falls on every arm), ``... vs one-window passes`` the same
against one window per pass. ``--only-ratio`` runs only those rounds; ``--arm NAME=FLAGS`` adds
a server with other flags to them.
Each scenario prints req/s, latency p50/p95/p99, errors by kind, the server's RSS and
GET /health latency measured every 100 ms on a connection of its own throughout, and the
server's batches (windows, requests and forward passes per batch, from GET /metrics).
Results also go to ``--out`` as JSON. Needs an otherwise idle machine for meaningful
figures (the 1-minute load average before each scenario is recorded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import torch

from structqa.data.readers import read_extractive

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared/data/splits/squad1-heldout.mrqa.jsonl.gz"
ONE_MB = 1_000_000
SERVER_FLAGS = ["--max-context-chars", "1100000", "--request-timeout", "300"]
#: the baselines: one window per forward pass (still pipelined: tokenizing and decoding overlap
#: the model, one request's windows beside another's), and one request at a time, whole (as a
#: plain server with one lock: the baseline of the throughput target)
BASE_ARMS = {
    "batched": [],
    "one-window": ["--max-batch-windows", "1", "--max-wait-ms", "0"],
    "one-request": ["--one-at-a-time"],
}


# ---- the server ------------------------------------------------------------------------


class Server:
    """`structqa serve` in a subprocess on a free loopback port."""

    def __init__(self, checkpoint: str, flags: list[str]):
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        cmd = [sys.executable, "-m", "structqa.cli", "serve", checkpoint, "--port", "0", *flags]
        self.flags = flags
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        self.port = 0
        found = threading.Event()

        def drain() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if "listening on http://" in line:
                    self.port = int(line.rsplit(":", 1)[1])
                    found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(300):
            self.stop()
            raise RuntimeError("the server did not start")
        deadline = time.monotonic() + 300
        while asyncio.run(_get(self.port, "/ready"))[0] != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("the server did not get ready")
            time.sleep(0.2)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---- a minimal keep-alive HTTP/1.1 client ----------------------------------------------


class Conn:
    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed by the server")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and "close" in value.lower():
                close = True
        data = await self.reader.readexactly(length)
        if close:
            self.close()
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = Conn(port)
    try:
        return await conn.request("GET", path)
    except OSError:
        return 0, b""
    finally:
        conn.close()


def batch_means(port: int) -> dict[str, float]:
    """Totals of the server's batch histograms so far (GET /metrics)."""
    _, text = asyncio.run(_get(port, "/metrics"))
    vals: dict[str, float] = {}
    for line in text.decode().splitlines():
        for name in ("windows", "requests", "passes", "seconds"):
            for part in ("sum", "count"):
                key = f"structqa_batch_{name}_{part} "
                if line.startswith(key):
                    vals[f"{name}_{part}"] = float(line.split()[1])
    return vals


def _batch_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    batches = after.get("windows_count", 0) - before.get("windows_count", 0)
    out = {"batches": batches}
    for name in ("windows", "requests", "passes", "seconds"):
        total = after.get(f"{name}_sum", 0) - before.get(f"{name}_sum", 0)
        out[f"{name}_per_batch"] = total / batches if batches else float("nan")
    return out


# ---- one scenario ----------------------------------------------------------------------


@dataclass
class Record:
    latencies: list[float] = field(default_factory=list)  # seconds, answered 200s
    errors: Counter = field(default_factory=Counter)  # "503", "conn:ConnectionResetError"
    completed_in_window: int = 0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _summary(rec: Record, seconds: float) -> dict[str, Any]:
    ms = [v * 1000 for v in rec.latencies]
    return {
        "requests_per_s": rec.completed_in_window / seconds,
        "answered": len(ms),
        "p50_ms": _pct(ms, 0.50),
        "p95_ms": _pct(ms, 0.95),
        "p99_ms": _pct(ms, 0.99),
        "max_ms": max(ms, default=float("nan")),
        "errors": dict(rec.errors),
    }


async def _client(
    port: int,
    bodies: list[bytes],
    start: int,
    stop_at: float,
    rec: Record,
    path: str = "/v1/answer",
) -> None:
    conn = Conn(port)
    i = start
    try:
        while time.monotonic() < stop_at:
            body = bodies[i % len(bodies)]
            i += 1
            t0 = time.monotonic()
            try:
                status, _ = await conn.request("POST", path, body)
            except (OSError, asyncio.IncompleteReadError, ConnectionError) as e:
                rec.errors[f"conn:{type(e).__name__}"] += 1
                conn.close()
                await asyncio.sleep(0.05)
                continue
            t1 = time.monotonic()
            if status == 200:
                rec.latencies.append(t1 - t0)
                rec.completed_in_window += t1 <= stop_at
            else:
                rec.errors[str(status)] += 1
                if status == 503:
                    await asyncio.sleep(0.05)  # (a client honouring Retry-After would wait)
    finally:
        conn.close()


async def _slow(port: int, kind: str, stop_at: float, outcomes: Counter) -> None:
    """A connection that trickles its headers or its body, a byte a second; reconnects."""
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as e:
            outcomes[f"connect:{type(e).__name__}"] += 1
            await asyncio.sleep(1)
            continue
        head = (
            b"POST /v1/answer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 5000\r\n"
        )
        if kind == "body":
            writer.write(head + b"\r\n")
            payload = b" " * 5000
        else:  # a header that never ends
            writer.write(head)
            payload = b"X-Slow: " + b"a" * 5000
        try:
            for b in payload:
                if time.monotonic() >= stop_at:
                    break
                writer.write(bytes([b]))
                await writer.drain()
                try:
                    line = await asyncio.wait_for(reader.readline(), 1.0)
                except TimeoutError:
                    continue
                outcomes[line.split()[1].decode() if line else "closed"] += 1
                break
        except OSError:
            outcomes["closed"] += 1
        writer.close()


async def _health(port: int, stop_at: float, out: list[float], errors: Counter) -> None:
    conn = Conn(port)
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        try:
            status, _ = await conn.request("GET", "/health")
            if status == 200:
                out.append(time.monotonic() - t0)
            else:
                errors[str(status)] += 1
        except (OSError, asyncio.IncompleteReadError, ConnectionError) as e:
            errors[type(e).__name__] += 1
            conn.close()
        await asyncio.sleep(0.1)
    conn.close()


async def _scenario(
    server: Server,
    bodies: list[bytes],
    clients: int,
    seconds: float,
    big: bytes | None = None,
    slow: int = 0,
) -> dict[str, Any]:
    stop_at = time.monotonic() + seconds
    normal, bigrec = Record(), Record()
    health: list[float] = []
    health_errors: Counter = Counter()
    slow_outcomes: Counter = Counter()
    rss: list[float] = []

    async def sample_rss() -> None:
        while time.monotonic() < stop_at:
            rss.append(server.rss_mb())
            await asyncio.sleep(1)

    step = max(1, len(bodies) // max(clients, 1))
    tasks = [
        asyncio.create_task(_client(server.port, bodies, c * step, stop_at, normal))
        for c in range(clients)
    ]
    if big is not None:
        tasks.append(asyncio.create_task(_client(server.port, [big], 0, stop_at, bigrec)))
    tasks += [
        asyncio.create_task(
            _slow(server.port, "headers" if s % 2 else "body", stop_at, slow_outcomes)
        )
        for s in range(slow)
    ]
    tasks.append(asyncio.create_task(_health(server.port, stop_at, health, health_errors)))
    tasks.append(asyncio.create_task(sample_rss()))
    load_before = os.getloadavg()[0]
    _, pending = await asyncio.wait(tasks, timeout=seconds + 30)
    for t in pending:  # (the 1 MB client's last request, still being scored)
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    out = {
        "clients": clients,
        "seconds": seconds,
        **_summary(normal, seconds),
        "health_p50_ms": _pct([h * 1000 for h in health], 0.5),
        "health_max_ms": max((h * 1000 for h in health), default=float("nan")),
        "health_checks": len(health),
        "health_errors": dict(health_errors),
        "rss_mb_start": rss[0] if rss else float("nan"),
        "rss_mb_end": server.rss_mb(),
        "rss_mb_max": max(rss, default=float("nan")),
        "rss_mb_every_10s": rss[::10],
        "loadavg_1m_before": load_before,
    }
    if big is not None:
        out["big_client"] = {"context_chars": ONE_MB, **_summary(bigrec, seconds)}
    if slow:
        out["slow_connections"] = {"count": slow, "outcomes": dict(slow_outcomes)}
    return out


def _print(name: str, r: dict[str, Any]) -> None:
    errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "none"
    print(
        f"{name:<22} {r['requests_per_s']:7.1f} req/s  p50 {r['p50_ms']:7.0f} ms  "
        f"p95 {r['p95_ms']:7.0f} ms  p99 {r['p99_ms']:7.0f} ms  errors {errs}  "
        f"RSS {r['rss_mb_end']:.0f} MB  /health p50 {r['health_p50_ms']:.1f} ms "
        f"max {r['health_max_ms']:.1f} ms",
        flush=True,
    )
    if "big_client" in r:
        b = r["big_client"]
        print(
            f"{'':<22} 1 MB client: {b['answered']} answered, p50 {b['p50_ms']:.0f} ms, "
            f"errors {b['errors'] or 'none'}",
            flush=True,
        )
    if "slow_connections" in r:
        print(f"{'':<22} slow connections: {r['slow_connections']['outcomes']}", flush=True)


# ---- the run ---------------------------------------------------------------------------


def _bodies(data: Path, n: int) -> tuple[list[bytes], bytes]:
    examples = read_extractive(data).examples
    bodies = [
        json.dumps({"question": ex.question, "context": ex.context}).encode() for ex in examples[:n]
    ]
    contexts: list[str] = []
    size = 0
    for ex in examples:  # distinct passages, in file order, up to 1 MB
        if not contexts or contexts[-1] != ex.context:
            contexts.append(ex.context)
            size += len(ex.context) + 1
        if size >= ONE_MB:
            break
    big_context = "\n".join(contexts)[:ONE_MB]
    big = json.dumps({"question": examples[0].question, "context": big_context}).encode()
    return bodies, big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--duration", type=float, default=20, help="seconds per scenario")
    ap.add_argument("--big-duration", type=float, default=60, help="the 1 MB scenario")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds for the ratio")
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--soak", type=float, default=0, help="only a soak of this many seconds")
    ap.add_argument(
        "--only-ratio",
        action="store_true",
        help="only the alternating rounds at 16 clients (JSON to OUT-ratio.json)",
    )
    ap.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="another server in the rounds at 16 clients, e.g. 'batch-4=--max-batch-windows 4'",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results/serve/bench.json")
    args = ap.parse_args()
    arms = dict(BASE_ARMS)
    for spec in args.arm:
        name, sep, flags = spec.partition("=")
        if not sep or not name or name in arms:
            ap.error(f"--arm {spec!r}: give NAME=FLAGS with a new NAME (not one of {list(arms)})")
        arms[name] = flags.split()
    bodies, big = _bodies(args.data, args.questions)
    prov = harness.Provenance.start(args, torch.device("cpu"))  # command, commit, machine
    result: dict[str, Any] = {
        "checkpoint": args.checkpoint,
        "data": str(args.data),
        "server_flags": SERVER_FLAGS,
    }
    if args.soak:
        server = Server(args.checkpoint, SERVER_FLAGS)
        try:
            r = asyncio.run(_scenario(server, bodies, 16, args.soak))
        finally:
            server.stop()
        _print("soak 16 clients", r)
        growth = r["rss_mb_end"] - r["rss_mb_start"]
        after_1min = r["rss_mb_end"] - r["rss_mb_every_10s"][min(6, len(r["rss_mb_every_10s"]) - 1)]
        print(
            f"RSS growth over {args.soak:.0f} s: {growth:+.1f} MB from the start, "
            f"{after_1min:+.1f} MB after the first minute",
            flush=True,
        )
        result["soak"] = {**r, "rss_growth_mb": growth, "rss_growth_after_1min_mb": after_1min}
        out = args.out.with_name(args.out.stem + "-soak.json")
    else:
        result.update(_comparison(args, arms, bodies, big))
        out = args.out.with_name(args.out.stem + "-ratio.json") if args.only_ratio else args.out
    prov.write(out, **result)
    print(f"wrote {out}", flush=True)


def _comparison(
    args: argparse.Namespace, arms: dict[str, list[str]], bodies: list[bytes], big: bytes
) -> dict[str, Any]:
    """The batched server's scenarios (unless --only-ratio), the baselines at 1 client, and the
    servers of ``arms`` (name -> flags: BASE_ARMS and those given with --arm) at 16 clients in
    alternating rounds; the ratios are printed."""
    servers = {arm: Server(args.checkpoint, SERVER_FLAGS + flags) for arm, flags in arms.items()}
    batched: dict[str, Any] = {}
    baselines: dict[str, Any] = {}
    rounds: list[dict[str, Any]] = []
    try:

        def run(name: str, arm: str, *a: Any, **kw: Any) -> dict[str, Any]:
            port = servers[arm].port
            before = batch_means(port)
            r = asyncio.run(_scenario(servers[arm], bodies, *a, **kw))
            r["batches"] = _batch_delta(before, batch_means(port))
            _print(name, r)
            return r

        if not args.only_ratio:
            for n in [int(c) for c in args.clients.split(",")]:
                batched[f"{n} clients"] = run(f"batched {n}", "batched", n, args.duration)
            batched["15 clients"] = run("batched 15", "batched", 15, args.big_duration)
            batched["15 clients + 1 MB"] = run(
                "batched 15 + 1 MB", "batched", 15, args.big_duration, big=big
            )
            batched["16 clients + 200 slow"] = run(
                "batched 16 + 200 slow", "batched", 16, args.duration, slow=200
            )
            for arm in ("one-window", "one-request"):
                baselines[arm] = {"1 client": run(f"{arm} 1", arm, 1, args.duration)}
        # the ratios: the servers at 16 clients in alternating rounds, the order reversed each
        # round (drift in the machine's other load then falls on every arm alike)
        for i in range(args.rounds):
            order = list(arms) if i % 2 == 0 else list(arms)[::-1]
            for arm in order:
                r = run(f"{arm} 16 (round {i + 1})", arm, 16, args.duration)
                rounds.append({"arm": arm, "round": i + 1, **r})
    finally:
        for server in servers.values():
            server.stop()

    def mean(arm: str) -> float:
        return sum(r["requests_per_s"] for r in rounds if r["arm"] == arm) / args.rounds

    def ratio(arm: str) -> float:
        return mean("batched") / mean(arm) if mean(arm) else float("nan")

    print(
        f"ratio throughput@16: {ratio('one-request'):.2f}x  (batched {mean('batched'):.1f} vs "
        f"one request at a time {mean('one-request'):.1f} req/s, mean of {args.rounds} "
        "alternating rounds)",
        flush=True,
    )
    print(
        f"ratio throughput@16 vs one-window passes: {ratio('one-window'):.2f}x  (one window "
        f"per pass {mean('one-window'):.1f} req/s)",
        flush=True,
    )
    for arm in list(arms)[len(BASE_ARMS) :]:
        print(
            f"{arm}: {mean(arm):.1f} req/s, batched / {arm} {ratio(arm):.2f}x, p99 "
            + ", ".join(f"{r['p99_ms']:.0f}" for r in rounds if r["arm"] == arm)
            + " ms",
            flush=True,
        )
    out: dict[str, Any] = {
        "arm_flags": arms,
        "rounds_at_16": rounds,
        "requests_per_s_at_16": {arm: mean(arm) for arm in arms},
        "ratio_throughput_at_16": ratio("one-request"),
        "ratio_throughput_at_16_vs_one_window": ratio("one-window"),
    }
    if not args.only_ratio:
        p99_rise = batched["15 clients + 1 MB"]["p99_ms"] / batched["15 clients"]["p99_ms"]
        print(f"p99 of 15 clients beside a 1 MB client / alone: {p99_rise:.2f}x", flush=True)
        out.update(batched=batched, baselines=baselines, p99_rise_beside_1mb=p99_rise)
    return out


if __name__ == "__main__":
    main()
