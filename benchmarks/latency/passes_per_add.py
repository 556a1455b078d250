"""Scheduler passes, task steps, wakeups and context switches per add, one append in flight
(1 KiB, E3 W3 A2), for the client and (averaged) each of the three bookies of a fresh
sandbox; PD, VD and BYPASS ledgers one after another, 300 untimed appends first (the method
of ``cpu_per_add.py``, which this adds the counts to).

    cd CHECKOUT && .venv/bin/python benchmarks/latency/passes_per_add.py LABEL [--asyncio] [--wakes]

The bookies run with ``benchmarks/latency/trio_passes`` on ``PYTHONPATH`` (its sitecustomize
counts every trio run loop's passes with ``bkframe.testing.scheduler_passes``); the client runs under trio with the same
instrument, or with ``--asyncio`` under asyncio, where a pass is one turn of the event loop
(``_run_once``). ``--wakes`` prints each ``waker -> woken`` edge seen at least 0.05 times
per add. The instrument costs CPU: take CPU per add from ``cpu_per_add.py``, not from here.
Context switches are from ``/proc/PID/task/*/status`` (all threads), the client's from
``getrusage``.
"""
# ruff: noqa
import asyncio, glob, json, os, resource, signal, subprocess, sys, tempfile, time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
import anyio, trio, bkframe
from bkframe.testing.scheduler_passes import PassCounter

label = sys.argv[1]
use_asyncio = "--asyncio" in sys.argv
show_wakes = "--wakes" in sys.argv
N, WARM = 2000, 300
d = f"/tmp/passes-data-{label}"
counts_dir = tempfile.mkdtemp(prefix="passes-counts-")
subprocess.run(["rm", "-rf", d])
log = open(d + ".log", "w")
env = {**os.environ, "BKFRAME_PASS_COUNTS": counts_dir,
       "PYTHONPATH": os.pathsep.join([os.path.join(HERE, "trio_passes"), os.environ.get("PYTHONPATH", "")])}
sb = subprocess.Popen([".venv/bin/bkframe", "sandbox", "--bookies", "3", "--data-dir", d], stdout=log, stderr=log, env=env)


class LoopCounter:
    """asyncio: one pass per turn of the event loop."""

    def __init__(self) -> None:
        self.passes = 0

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        run_once = loop._run_once

        def counted():
            self.passes += 1
            run_once()

        loop._run_once = counted

    def snapshot(self) -> dict:
        return {"passes": self.passes, "busy_passes": 0, "steps": {}, "wakes": {}}


try:
    path = os.path.join(d, "sandbox.json")
    t = time.time()
    while not os.path.exists(path) or not os.path.getsize(path):
        assert time.time() - t < 60; time.sleep(0.2)
    time.sleep(0.5)
    meta = json.load(open(path))
    pids = [b["pid"] for b in meta["bookies"]]
    tick = os.sysconf("SC_CLK_TCK")

    def switches(pid):
        vol = inv = 0
        for st in glob.glob(f"/proc/{pid}/task/*/status"):
            for line in open(st):
                if line.startswith("voluntary_ctxt_switches"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    inv += int(line.split()[1])
        return vol, inv

    def bookie_counts():
        for pid in pids:
            try:
                os.unlink(os.path.join(counts_dir, f"{pid}.json"))
            except FileNotFoundError:
                pass
            os.kill(pid, signal.SIGUSR2)
        out = []
        for pid in pids:
            f = os.path.join(counts_dir, f"{pid}.json")
            t = time.time()
            while not os.path.exists(f):
                assert time.time() - t < 10, f"bookie {pid} wrote no counts: is the instrument on?"
                time.sleep(0.01)
            s = json.load(open(f))
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            s["cpu"] = (int(stat[11]) + int(stat[12])) / tick
            s["vol"], s["inv"] = switches(pid)
            out.append(s)
        return out

    def client_counts(counter):
        r = resource.getrusage(resource.RUSAGE_SELF)
        s = counter.snapshot()
        s["cpu"], s["vol"], s["inv"] = r.ru_utime + r.ru_stime, r.ru_nvcsw, r.ru_nivcsw
        return s

    def diff(after, before, n):
        out = {k: (after[k] - before[k]) / n for k in ("passes", "busy_passes", "cpu", "vol", "inv")}
        for k in ("steps", "wakes"):
            c = Counter(after[k])
            c.subtract(before[k])
            out[k] = {name: v / n for name, v in c.items() if v}
        return out

    def mean(rows):
        out = {k: sum(r[k] for r in rows) / len(rows) for k in ("passes", "busy_passes", "cpu", "vol", "inv")}
        for k in ("steps", "wakes"):
            c = Counter()
            for r in rows:
                c.update(r[k])
            out[k] = {name: v / len(rows) for name, v in c.items()}
        return out

    def show(who, s):
        steps = sum(s["steps"].values())
        print(f"  {who:7} CPU {s['cpu'] * 1e6:5.0f} us  passes {s['passes']:4.1f} (busy {s['busy_passes']:3.1f})  "
              f"task steps {steps:4.1f}  switches vol {s['vol']:3.1f} inv {s['inv']:3.1f}")
        if show_wakes:
            for edge, v in sorted(s["wakes"].items(), key=lambda kv: -kv[1]):
                if v >= 0.05:
                    print(f"          {v:4.2f}  {edge}")

    async def main(counter):
        if use_asyncio:
            counter.install()
        async with bkframe.open_client(meta["metadata"]) as c:
            for lt in ("PD_JOURNAL", "VD_JOURNAL", "BYPASS_JOURNAL"):
                w = await c.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=lt, password=b"p")
                payload = os.urandom(1024)
                for _ in range(WARM):
                    await w.append(payload)
                b0, c0 = bookie_counts(), client_counts(counter)
                lat = []
                for _ in range(N):
                    t = time.perf_counter()
                    await w.append(payload)
                    lat.append(time.perf_counter() - t)
                c1, b1 = client_counts(counter), bookie_counts()
                lat.sort()
                print(f"{label} {lt} ({'asyncio' if use_asyncio else 'trio'} client): p50 {lat[N // 2] * 1e3:.3f} ms; per add:", flush=True)
                show("client", diff(c1, c0, N))
                show("bookie", mean([diff(x, y, N) for x, y in zip(b1, b0)]))
                await w.close()

    if use_asyncio:
        counter = LoopCounter()
        anyio.run(main, counter, backend="asyncio")
    else:
        counter = PassCounter()
        trio.run(main, counter, instruments=[counter])
finally:
    sb.send_signal(signal.SIGTERM)
    sb.wait(30)
    subprocess.run(["rm", "-rf", d, counts_dir])
