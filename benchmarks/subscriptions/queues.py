"""A log shared by a fleet of consumers, against the peers' work queues (issue 47, item 7).

Each system is started fresh on loopback, loaded with ``--records`` records of ``--size``
bytes, then ``--consumers`` consumer processes take them, each record acked on its own, in
two ways (``--acks``):

- ``confirmed``: each ack confirmed by the server before the next record (as a worker that
  must not lose its acks does);
- ``grouped``: acks not waited for one by one, as Pulsar's consumers ack by default (grouped,
  no receipt) and Kafka share groups do (acks go with the next poll): a consumer that dies
  has the records whose acks were not sent yet delivered again.

The systems:

- ``bkframe``: a sandbox of 3 bookie processes (sqlite metadata), a ``shared`` subscription;
  confirmed: ``msg.ack()`` returns once the ack is in the subscription's state ledger
  (PD_JOURNAL, A=2); grouped: ``subscribe(..., group_acks=True)`` (the acks of a prefetch go
  to the owner in one request, durable the same way).
- ``bkframe-bypass``: the same with the subscription's state ledgers ``BYPASS_JOURNAL``: a
  confirmed ack is in the page cache of two bookies, not fsynced (what NATS JetStream's file
  store does by default; it survives the kill of every process, not a power cut).
- ``redis-always``: Redis Streams, one consumer group, ``XREADGROUP`` / ``XACK``, AOF with
  ``appendfsync always``; grouped: one ``XACK`` of the 16 ids read together.
- ``nats-r3``: NATS JetStream, a 3-node loopback cluster, a work-queue stream with 3
  replicas on file storage, one durable pull consumer shared by every process; confirmed:
  ``ack_sync`` for each message; grouped: ``ack`` (sent, no reply awaited).

Printed: records/s from the consumers' start (each imported, connected and subscribed
before it: start-up is not the records' work) to the last ack, and the latency of one record
to an idle consumer (append to receipt, median of ``--pings``), with, for bkframe, the same
for a reader tailing the log (the aim: dispatch within 2x a tail's). Also the CPU seconds
per 1,000 records of each server process and of the consumers together (``cpu_per_1k``:
``/proc/<pid>/stat`` utime+stime from the consumers' start to their end, and each consumer's
own ``os.times()``), which the machine's load does not change much; for bkframe the bookie
that hosts the owner is ``owner``.

    .venv/bin/python benchmarks/subscriptions/queues.py --records 20000 --consumers 8 --acks confirmed,grouped

Installs what it needs: Debian's redis-server and nats-server (apt-get, when missing);
the Python clients come with the project's dev dependencies (uv sync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
SYSTEMS = ("bkframe", "bkframe-bypass", "redis-always", "nats-r3")
IDLE_END_S = 3.0  # a consumer that got nothing for this long reports and stops


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need_debian(*commands: str) -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        print(f"[setup] apt-get install {' '.join(missing)}", file=sys.stderr)
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s:.0f} s")


# -- the systems (the parent's side: start, load, produce one, stop) ---------------------------


class System:
    name = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None: ...
    def load(self, count: int, size: int) -> None: ...
    def publish_one(self, payload: bytes) -> None: ...
    def consumer_args(self) -> list[str]: ...

    def cpu_pids(self) -> dict[str, int]:
        """The server processes whose CPU is counted, by label."""
        return {f"server-{i}": p.pid for i, p in enumerate(self.procs)}

    def cpu_labels(self) -> dict[str, str]:
        """Labels given once the run is over (bkframe: which bookie hosts the owner)."""
        return {}

    def stop(self) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Bkframe(System):
    name = "bkframe"
    #: The subscription's state ledgers (docs/subscriptions.md, "How durable an ack is").
    state_ledger_type = "PD_JOURNAL"

    def start(self) -> None:
        sys.path.insert(0, str(ROOT))
        from bkframe.launcher import Cluster

        # The admin HTTP service on: the owner's metrics tell events per state-ledger entry.
        self.cluster = Cluster(self.workdir / "cluster", 3, bookie_args=("--http-port", "0")).start(parallel=True)
        self.uri = self.cluster.metadata
        import bkframe

        # The producer publishes its LAC at once: a lone record is visible to the subscription's
        # owner and to a tailing reader alike without waiting for the next append.
        self.bk = bkframe.connect(self.uri, explicit_lac_interval_s=0.001)
        self.bk.logs.create("jobs", rollover_entries=50_000)
        self.writer = self.bk.logs.open_writer("jobs")

    def load(self, count: int, size: int) -> None:
        payload = b"x" * size
        for lo in range(0, count, 1000):
            self.writer.append_many([payload] * min(1000, count - lo))
        self.bk.logs.create_subscription("jobs", "workers", start="earliest", state_ledger_type=self.state_ledger_type)

    def publish_one(self, payload: bytes) -> None:
        self.writer.append_many([payload])

    def consumer_args(self) -> list[str]:
        return [self.uri]

    def cpu_pids(self) -> dict[str, int]:
        return {b.bookie_id: b.proc.pid for b in self.cluster.bookies if b.proc is not None}

    def cpu_labels(self) -> dict[str, str]:
        owner = self.bk.logs.subscription_stats("jobs", "workers").owner
        return {b.bookie_id: "owner" if b.bookie_id == owner else "other" for b in self.cluster.bookies}

    def state_entries(self) -> tuple[int, int]:
        """(entries, events) the owner appended to the subscription's state ledgers so far."""
        import urllib.request

        owner = self.bk.logs.subscription_stats("jobs", "workers").owner
        url = self.cluster.by_id(owner).http_url
        found = {"entries": 0, "events": 0}
        for line in urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode().splitlines():
            for name in found:
                if line.startswith(f"bkframe_subscription_state_{name}_total{{") and 'subscription="workers"' in line:
                    found[name] = int(float(line.rsplit(" ", 1)[1]))
        return found["entries"], found["events"]

    def stop(self) -> None:
        self.writer.close()
        self.bk.close()
        self.cluster.close()


class BkframeBypass(Bkframe):
    """Acks in BYPASS_JOURNAL state ledgers: in the page cache of two bookies, not fsynced --
    NATS JetStream's default durability (it does not fsync each message either)."""

    name = "bkframe-bypass"
    state_ledger_type = "BYPASS_JOURNAL"


class RedisAlways(System):
    name = "redis-always"

    def start(self) -> None:
        import redis

        need_debian("redis-server")
        self.port = free_port()
        self.procs.append(subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        wait_port(self.port)
        self.r = redis.Redis(host="127.0.0.1", port=self.port)

    def load(self, count: int, size: int) -> None:
        payload = b"x" * size
        for lo in range(0, count, 1000):
            pipe = self.r.pipeline(transaction=False)
            for _ in range(min(1000, count - lo)):
                pipe.xadd("jobs", {"p": payload})
            pipe.execute()
        self.r.xgroup_create("jobs", "workers", id="0")

    def publish_one(self, payload: bytes) -> None:
        self.r.xadd("jobs", {"p": payload})

    def consumer_args(self) -> list[str]:
        return [str(self.port)]


class NatsR3(System):
    name = "nats-r3"

    def start(self) -> None:
        need_debian("nats-server")
        ports, cports = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
        for i in range(3):
            routes = ",".join(f"nats://127.0.0.1:{cp}" for j, cp in enumerate(cports) if j != i)
            d = self.workdir / f"n{i}"
            d.mkdir()
            self.procs.append(subprocess.Popen(
                ["nats-server", "-a", "127.0.0.1", "-p", str(ports[i]), "-n", f"n{i}", "--cluster_name", "bench",
                 "--cluster", f"nats://127.0.0.1:{cports[i]}", "--routes", routes, "-js", "-sd", str(d)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
        for p in ports:
            wait_port(p)
        self.url = f"nats://127.0.0.1:{ports[0]}"
        asyncio.run(self._setup())

    async def _setup(self) -> None:
        import nats
        from nats.js.api import ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

        for _ in range(100):  # the cluster elects its meta leader first
            try:
                nc = await nats.connect(self.url)
                js = nc.jetstream()
                await js.add_stream(StreamConfig(name="jobs", subjects=["jobs"], retention=RetentionPolicy.WORK_QUEUE,
                                                 storage=StorageType.FILE, num_replicas=3))
                await js.add_consumer("jobs", ConsumerConfig(durable_name="workers", ack_wait=60, max_ack_pending=-1))
                await nc.close()
                return
            except Exception:  # noqa: BLE001 - not ready yet
                await asyncio.sleep(0.2)
        raise RuntimeError("the NATS cluster did not come up")

    def load(self, count: int, size: int) -> None:
        async def run() -> None:
            import nats

            nc = await nats.connect(self.url)
            js = nc.jetstream()
            payload = b"x" * size
            for lo in range(0, count, 500):
                await asyncio.gather(*(js.publish("jobs", payload) for _ in range(min(500, count - lo))))
            await nc.close()

        asyncio.run(run())

    def publish_one(self, payload: bytes) -> None:
        async def run() -> None:
            import nats

            nc = await nats.connect(self.url)
            await nc.jetstream().publish("jobs", payload)
            await nc.close()

        asyncio.run(run())

    def consumer_args(self) -> list[str]:
        return [self.url]


# -- the consumers (each a process of its own) ---------------------------------------------------


class Start:
    """A consumer's start: it imports, connects and subscribes first, says ``ready`` and waits
    for ``go``; its CPU counts from there (``os.times``), so it is the records' and not the
    interpreter's start-up."""

    def __init__(self) -> None:
        self.times = os.times()

    def go(self) -> None:
        print("ready", flush=True)
        sys.stdin.readline()  # "go"
        self.times = os.times()


def consume_bkframe(uri: str, grouped: bool, start: Start) -> tuple[int, float, list[float]]:
    import bkframe

    count, last, lat = 0, 0.0, []
    with bkframe.connect(uri) as bk, bk.logs.subscribe("jobs", "workers", prefetch=16, group_acks=grouped) as sub:
        start.go()
        while True:
            msg = sub.receive(timeout_s=IDLE_END_S)
            if msg is None:
                return count, last, lat
            if msg.payload.startswith(b"ping "):
                lat.append(time.time() - float(msg.payload[5:]))
            msg.ack()
            count, last = count + 1, time.time()


def consume_redis(port: str, me: str, grouped: bool, start: Start) -> tuple[int, float, list[float]]:
    import redis

    r = redis.Redis(host="127.0.0.1", port=int(port))
    r.ping()
    start.go()
    count, last, lat = 0, 0.0, []
    while True:
        got = r.xreadgroup("workers", me, {"jobs": ">"}, count=16, block=int(IDLE_END_S * 1000))
        if not got:
            return count, last, lat
        for _, records in got:
            for rid, fields in records:
                if fields[b"p"].startswith(b"ping "):
                    lat.append(time.time() - float(fields[b"p"][5:]))
                if not grouped:
                    r.xack("jobs", "workers", rid)
                count, last = count + 1, time.time()
            if grouped:
                r.xack("jobs", "workers", *(rid for rid, _ in records))
                last = time.time()


def consume_nats(url: str, grouped: bool, start: Start) -> tuple[int, float, list[float]]:
    async def run() -> tuple[int, float, list[float]]:
        import nats
        from nats.errors import TimeoutError as NatsTimeout

        nc = await nats.connect(url)
        sub = await nc.jetstream().pull_subscribe("jobs", durable="workers")
        await asyncio.get_running_loop().run_in_executor(None, start.go)
        count, last, lat = 0, 0.0, []
        idle_since = time.monotonic()
        while True:
            try:
                msgs = await sub.fetch(16, timeout=IDLE_END_S)
            except NatsTimeout:
                await nc.close()  # flushes the acks sent without a reply
                return count, last, lat
            except Exception as e:  # a leader moving in the cluster: ask again
                if time.monotonic() - idle_since > 30:
                    raise RuntimeError(f"nats fetch keeps failing: {e!r}") from e
                await asyncio.sleep(0.1)
                continue
            idle_since = time.monotonic()
            for m in msgs:
                if m.data.startswith(b"ping "):
                    lat.append(time.time() - float(m.data[5:]))
                await (m.ack() if grouped else m.ack_sync())
                count, last = count + 1, time.time()

    return asyncio.run(run())


def consumer_main(system: str, args: list[str], me: str) -> None:
    acks, target = args[0], args[1]
    grouped = acks == "grouped"
    start = Start()
    if system.startswith("bkframe"):
        result = consume_bkframe(target, grouped, start)
    elif system == "redis-always":
        result = consume_redis(target, me, grouped, start)
    else:
        result = consume_nats(target, grouped, start)
    t0, t1 = start.times, os.times()
    cpu, sys_cpu = (t1.user - t0.user) + (t1.system - t0.system), t1.system - t0.system
    print(json.dumps({"count": result[0], "last": result[1], "latencies": result[2], "cpu": cpu, "sys": sys_cpu}), flush=True)


def cpu_s(pid: int) -> tuple[float, float]:
    """utime + stime and stime of ``pid`` so far (s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[12]) / tick


# -- one run ------------------------------------------------------------------------------------


def tail_latency(system: Bkframe, pings: int) -> list[float]:
    """A reader tailing the log: append to receipt, one record at a time."""
    import bkframe

    out: list[float] = []
    with bkframe.connect(system.uri, explicit_lac_interval_s=0.0) as bk:
        reader = bk.logs.reader("jobs")
        end = reader.end()
        tail = reader.tail(end)
        for _ in range(pings):
            t0 = time.time()
            system.publish_one(b"tail")
            next(iter(tail))
            out.append(time.time() - t0)
            # Spaced as the dispatch pings are (_pings): back to back, each record came while the
            # tail's long poll had just started; 50 ms apart, some come as a poll times out
            # and the tail checks the log's record (~2 ms more) -- the same for both latencies.
            time.sleep(0.05)
    return out


def start_profiles(pids: dict[str, int], where: Path | None, name: str) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """``py-spy record`` of each server process (``--profile``; samples of the thread holding
    the GIL, collapsed stacks): where its CPU goes. It slows what it samples: a profiled run's
    figures are not the benchmark's."""
    if where is None:
        return []
    where.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy")
    command = [spy] if spy else [str(Path.home() / ".local/bin/uvx"), "py-spy"]
    return [
        (label, subprocess.Popen(
            [*command, "record", "--gil", "-r", "250", "-p", str(pid), "-f", "raw", "-o", str(where / f"{name}-{label}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        for label, pid in pids.items()
    ]


def stop_profiles(
    spies: list[tuple[str, subprocess.Popen[bytes]]], where: Path | None, name: str, labels: dict[str, str],
) -> None:
    for _, spy in spies:
        spy.send_signal(signal.SIGINT)
    for label, spy in spies:
        spy.wait(timeout=60)
        assert where is not None
        if label in labels:
            (where / f"{name}-{label}.txt").rename(where / f"{name}-{labels[label]}-{label}.txt")


def run_system(
    cls: type[System], records: int, size: int, consumers: int, pings: int, acks: str, profile: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"subbench-{cls.name}-") as tmp:
        system = cls(Path(tmp))
        system.start()
        try:
            system.load(records, size)
            procs = [
                subprocess.Popen([sys.executable, str(HERE), "--consumer", cls.name, f"c{i}", acks, *system.consumer_args()],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for i in range(consumers)
            ]
            for p in procs:  # connected and subscribed before the clock starts
                assert p.stdout is not None
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"a {cls.name} consumer did not start")
            pids = system.cpu_pids()
            spies = start_profiles(pids, profile, f"{cls.name}-{acks}")
            entries0 = system.state_entries() if isinstance(system, Bkframe) else (0, 0)
            cpu0 = {label: cpu_s(pid) for label, pid in pids.items()}
            go = time.time()
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            # Idle dispatch latency: once the backlog is done, one consumer left idle gets pings.
            results = []
            for p in procs:
                out, _ = p.communicate(timeout=600)
                results.append(json.loads(out.strip().splitlines()[-1]))
            cpu1 = {label: cpu_s(pid) for label, pid in pids.items()}
            entries1 = system.state_entries() if isinstance(system, Bkframe) else (0, 0)
            total = sum(r["count"] for r in results)
            elapsed = max(r["last"] for r in results) - go
            labels = system.cpu_labels()
            stop_profiles(spies, profile, f"{cls.name}-{acks}", labels)
            named = {label: f"{label}({labels[label]})" if label in labels else label for label in pids}
            per_1k = {named[label]: round((cpu1[label][0] - cpu0[label][0]) * 1000 / total, 3) for label in pids}
            per_1k["consumers"] = round(sum(r["cpu"] for r in results) * 1000 / total, 3)
            per_1k["total"] = round(sum(per_1k.values()), 3)
            # Of which in the kernel (system time): sockets, the journal's writes and fsyncs.
            sys_1k = {named[label]: round((cpu1[label][1] - cpu0[label][1]) * 1000 / total, 3) for label in pids}
            sys_1k["consumers"] = round(sum(r.get("sys", 0.0) for r in results) * 1000 / total, 3)
            ping = _pings(system, cls, pings, acks)
            row: dict[str, Any] = {
                "system": cls.name, "acks": acks, "records": records, "consumed": total, "size": size, "consumers": consumers,
                "records_per_s": round(records / elapsed), "idle_dispatch_ms_p50": round(statistics.median(ping) * 1000, 2),
                "cpu_per_1k": per_1k, "sys_per_1k": sys_1k, "load": os.getloadavg()[0],
            }
            if isinstance(system, Bkframe):
                # The group commit: state-ledger entries per 1,000 records, and events in each.
                entries, events = entries1[0] - entries0[0], entries1[1] - entries0[1]
                row["state_entries_per_1k"] = round(entries * 1000 / total, 1)
                row["events_per_entry"] = round(events / entries, 2) if entries else 0.0
                row["tail_ms_p50"] = round(statistics.median(tail_latency(system, pings)) * 1000, 2)
            return row
        finally:
            system.stop()


def _pings(system: System, cls: type[System], pings: int, acks: str) -> list[float]:
    proc = subprocess.Popen([sys.executable, str(HERE), "--consumer", cls.name, "pinged", acks, *system.consumer_args()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"a {cls.name} consumer did not start")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    time.sleep(1.0)  # idle: waiting for a record
    for _ in range(pings):
        system.publish_one(b"ping %.6f" % time.time())
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=120)
    return list(json.loads(out.strip().splitlines()[-1])["latencies"]) or [float("nan")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--pings", type=int, default=30)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--acks", default="confirmed,grouped", help="confirmed, grouped, or both (comma-separated)")
    parser.add_argument("--rounds", type=int, default=1, help="Each case this many times, taking turns.")
    parser.add_argument("--json", type=Path, default=None, help="Also write the rows here.")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy each server process while the consumers run, into this folder (slows them).")
    parser.add_argument("--consumer", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        system, me, *rest = args.consumer
        consumer_main(system, rest, me)
        return
    classes = {c.name: c for c in (Bkframe, BkframeBypass, RedisAlways, NatsR3)}
    rows = []
    for _ in range(args.rounds):
        for acks in args.acks.split(","):
            for name in args.systems.split(","):
                row = run_system(classes[name], args.records, args.size, args.consumers, args.pings, acks, args.profile)
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
