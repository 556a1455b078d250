"""What a peer run cost the machine: a plugin of ``../shared/bench/peers.py`` (issue 50, item 3).

PD 1 KiB against Redis AOF-always moved between 0.9x and 1.5x from run to run on one
machine. This plugin puts, beside each run's rate, what could move it:

- ``cpu_us`` — CPU per record of the system under test (its servers from ``/proc/<pid>/stat``,
  its client: the harness itself for Redis, the driver process for bkframe), split into
  user and kernel time;
- ``others_cores`` — CPU the rest of the machine used meanwhile, in cores (``/proc/stat``'s
  busy time less the system's own): another process's work competes with the system's;
- ``steal_cores`` — the hypervisor's steal (``/proc/stat``), the VM's share taken by its host;
- ``each_cpu_us`` — the same per process (servers, then the client);
- ``bookie_requests_per_entry`` — for bkframe, the bookies' requests per entry added (from
  their metrics endpoints): how well the client's adds were batched into requests;
- ``calibration_ms`` — the CPU time of a fixed piece of Python work, before and after the
  run: how fast the machine itself was then;
- ``flushes`` and ``flush_ms`` — the disk's cache flushes (an ``fdatasync`` each, from
  ``/proc/diskstats``) per 1,000 records and the mean time one took: group commit, and how
  fast the disk was in that run.

It wraps the peers by their own names, so the table reads as usual::

    python3 ../shared/bench/peers.py --plugin ../shared/bench/bkframe_peer.py \
        --plugin benchmarks/peers_costs.py --systems redis-always,bkframe-pd --sizes 1024

Each row's ``notes`` then carries the costs (also in the JSON of ``--out``). With
``PEERS_COSTS_PIN=1`` in the environment, the servers run on the first core and the client
on the second.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
import time
import urllib.request
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
#: ``PEERS_COSTS_PIN=1``: a server's processes on core 0, the client on core 1.
PIN = os.environ.get("PEERS_COSTS_PIN") == "1"


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def _machine() -> dict[str, float]:
    """Seconds of the whole machine's CPU by kind (``/proc/stat``'s first line)."""
    with open("/proc/stat") as f:
        values = [int(v) / TICK for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return {"busy": user + nice + system + irq + softirq, "idle": idle, "iowait": iowait, "steal": steal}


def _disk(device: str) -> tuple[int, int]:
    """(flushes completed, ms spent flushing) of one block device (kernel >= 5.5)."""
    with open("/proc/diskstats") as f:
        for line in f:
            fields = line.split()
            if fields[2] == device and len(fields) >= 20:
                return int(fields[18]), int(fields[19])
    return 0, 0


def _bookie_counters(url: str) -> dict[str, float]:
    """A bookie's unlabelled counters from its metrics endpoint (0 series if it fails)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    counters: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("bkframe_bookie_") and name.endswith("_total"):
            counters[name] = float(value)
    return counters


def _device_of(path: str) -> str:
    """The whole-disk device a path's filesystem lives on (``vda`` for ``/dev/vda1``)."""
    dev = os.stat(path).st_dev
    name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"))
    parent = os.path.realpath(f"/sys/class/block/{name}/..")
    return os.path.basename(parent) if os.path.exists(os.path.join(parent, "dev")) else name


def calibrate() -> float:
    """CPU milliseconds this process takes for a fixed piece of pure-Python work: the same
    instructions take longer when the machine is slower (its host's other tenants, the CPU's
    clock), which no counter inside the VM shows (steal reads 0 here)."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        total = 0
        for i in range(200_000):
            total += i * i % 7
        best = min(best, time.process_time() - start)
    return round(best * 1000, 2)


class Costs:
    """Counters at the start of a run; :meth:`since` gives the run's costs."""

    def __init__(self, pids: list[int], device: str) -> None:
        self.pids, self.device = pids, device
        self.at = time.monotonic()
        self.servers = [_proc_cpu(p) for p in pids]
        self.me = resource.getrusage(resource.RUSAGE_SELF)
        self.children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.machine = _machine()
        self.disk = _disk(device)

    def since(self, count: int) -> dict[str, Any]:
        seconds = time.monotonic() - self.at
        servers = [_proc_cpu(p) for p in self.pids]
        me = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        machine, disk = _machine(), _disk(self.device)
        user = sum(s[0] for s in servers) - sum(s[0] for s in self.servers)
        system = sum(s[1] for s in servers) - sum(s[1] for s in self.servers)
        user += me.ru_utime - self.me.ru_utime + children.ru_utime - self.children.ru_utime
        system += me.ru_stime - self.me.ru_stime + children.ru_stime - self.children.ru_stime
        busy = machine["busy"] - self.machine["busy"]
        each = [round((a[0] + a[1] - b[0] - b[1]) / count * 1e6, 1) for a, b in zip(servers, self.servers)]
        client = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
        client -= self.me.ru_utime + self.me.ru_stime + self.children.ru_utime + self.children.ru_stime
        each.append(round(client / count * 1e6, 1))
        flushes, flush_ms = disk[0] - self.disk[0], disk[1] - self.disk[1]
        return {
            "cpu_us": round((user + system) / count * 1e6, 1),
            "each_cpu_us": each,
            "cpu_user_us": round(user / count * 1e6, 1),
            "cpu_kernel_us": round(system / count * 1e6, 1),
            "system_cores": round((user + system) / seconds, 2),
            "others_cores": round(max(0.0, busy - user - system) / seconds, 2),
            "steal_cores": round((machine["steal"] - self.machine["steal"]) / seconds, 3),
            "iowait_cores": round((machine["iowait"] - self.machine["iowait"]) / seconds, 2),
            "flushes_per_1k": round(flushes / count * 1000, 1),
            "flush_ms": round(flush_ms / flushes, 2) if flushes else None,
            "loadavg": round(os.getloadavg()[0], 2),
        }


class Measured:
    """A peer whose every run also says what it cost (see the module's docstring). The
    costs span the whole ``run()``: its warm-up (5% of the count) is counted in, as one
    run's rate and costs then describe the same seconds."""

    def __init__(self, peer: Any) -> None:
        self.peer = peer
        self.name, self.durability = peer.name, peer.durability

    def start(self, workdir: str) -> None:
        self.peer.start(workdir)
        self.device = _device_of(workdir)

    def run(self, payload: bytes, warmup: int, count: int) -> Any:
        mask = os.sched_getaffinity(0)
        if PIN and self.peer.pids():
            # The servers on the first core, the client (this process and its driver) on the
            # second: the kernel no longer moves four busy processes between two cores.
            for pid in self.peer.pids():
                os.sched_setaffinity(pid, {0})
            os.sched_setaffinity(0, {1})
        speed = calibrate()
        costs = Costs(self.peer.pids(), self.device)
        urls = [b["http"] for b in getattr(self.peer, "meta", {}).get("bookies", []) if b.get("http")]
        before = [_bookie_counters(u) for u in urls]
        run = self.peer.run(payload, warmup, count)
        run.notes = {**run.notes, **costs.since(warmup + count)}
        run.notes["calibration_ms"] = round((speed + calibrate()) / 2, 2)
        os.sched_setaffinity(0, mask)
        run.notes["pinned"] = PIN
        if urls:
            deltas = [{k: v - b.get(k, 0) for k, v in _bookie_counters(u).items()} for u, b in zip(urls, before)]
            added = sum(d.get("bkframe_bookie_entries_added_total", 0) for d in deltas)
            requests = sum(d.get("bkframe_bookie_requests_total", 0) for d in deltas)
            run.notes["bookie_requests_per_entry"] = round(requests / added, 3) if added else None
        notes = run.notes
        print(
            f"[costs] {self.name}: {notes['cpu_us']} CPU-us/record ({notes['system_cores']} cores; each process "
            f"{notes['each_cpu_us']}), others {notes['others_cores']} cores, steal {notes['steal_cores']}, "
            f"{notes['flushes_per_1k']} flushes/1k at {notes['flush_ms']} ms, requests/entry "
            f"{notes.get('bookie_requests_per_entry')}, calibration {notes['calibration_ms']} ms, load {notes['loadavg']}",
            file=sys.stderr,
            flush=True,
        )
        return run

    def pids(self) -> list[int]:
        return self.peer.pids()

    def stop(self) -> None:
        self.peer.stop()


def make_peers(args: Any) -> list[Measured]:
    peers_module = sys.modules["peers"]
    others = [p for p in args.plugin if os.path.abspath(p) != os.path.abspath(__file__)]
    wrapped: list[Measured] = []
    # The built-in peers, and the other plugins' (bkframe_peer.py's), by name.
    for name in args.systems:
        peer = _built_in(peers_module, args, name) or _from_plugins(others, args, name)
        if peer is not None:
            wrapped.append(Measured(peer))
    return wrapped


def _built_in(peers_module: Any, args: Any, name: str) -> Any:
    made = {
        "redis-always": lambda: peers_module.RedisPeer("always", args.batch),
        "redis-everysec": lambda: peers_module.RedisPeer("everysec", args.batch),
        "nats-r1": lambda: peers_module.NatsPeer(1, args.window),
        "nats-r3": lambda: peers_module.NatsPeer(3, args.window),
        "disk-group": lambda: peers_module.DiskGroupPeer(args.group_kib * 1024, args.group_ms),
    }
    return made[name]() if name in made else None


def _from_plugins(paths: list[str], args: Any, name: str) -> Any:
    # peers.py loads plugins without registering them in sys.modules: load them again.
    for path in paths:
        spec = importlib.util.spec_from_file_location(f"peers_costs_{len(path)}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for peer in module.make_peers(args):
            if peer.name == name:
                return peer
    return None
