"""CPU and voluntary context switches per add, one append in flight (1 KiB, E3 W3 A2), for the
client process and (averaged) each of the three bookies of a fresh sandbox; PD, VD and
BYPASS ledgers one after another on the same sandbox, 300 untimed appends first.

    cd CHECKOUT && .venv/bin/python benchmarks/latency/cpu_per_add.py LABEL

(from the checkout: the sandbox runs that checkout's ``.venv/bin/bkframe``). The bookies'
CPU is read from ``/proc/PID/stat`` (their pids from ``sandbox.json``), the client's from
``getrusage``. Its data directory ``/tmp/lat2-cpu-LABEL`` is removed afterwards.
"""
# ruff: noqa
import glob, json, os, resource, signal, subprocess, sys, time
import trio, bkframe

label = sys.argv[1]
N, WARM = 2000, 300
d = f"/tmp/lat2-cpu-{label}"
subprocess.run(["rm", "-rf", d])
log = open(d + ".log", "w")
sb = subprocess.Popen([".venv/bin/bkframe", "sandbox", "--bookies", "3", "--data-dir", d], stdout=log, stderr=log)
try:
    path = os.path.join(d, "sandbox.json")
    t = time.time()
    while not os.path.exists(path) or not os.path.getsize(path):
        assert time.time() - t < 60; time.sleep(0.2)
    time.sleep(0.5)
    meta = json.load(open(path))
    pids = [b["pid"] for b in meta["bookies"]]
    tick = os.sysconf("SC_CLK_TCK")

    def bookie_stats():
        out = []
        for pid in pids:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(f[11]) + int(f[12])) / tick
            sw = 0
            for st in glob.glob(f"/proc/{pid}/task/*/status"):
                for line in open(st):
                    if line.startswith("voluntary_ctxt_switches"):
                        sw += int(line.split()[1])
            out.append((cpu, sw))
        return out

    def me():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime, r.ru_nvcsw

    async def main():
        async with bkframe.open_client(meta["metadata"]) as c:
            for lt in ("PD_JOURNAL", "VD_JOURNAL", "BYPASS_JOURNAL"):
                w = await c.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=lt, password=b"p")
                payload = os.urandom(1024)
                for _ in range(WARM):
                    await w.append(payload)
                b0, c0 = bookie_stats(), me()
                lat = []
                for _ in range(N):
                    t = time.perf_counter()
                    await w.append(payload)
                    lat.append(time.perf_counter() - t)
                b1, c1 = bookie_stats(), me()
                lat.sort()
                bcpu = sum(x[0] - y[0] for x, y in zip(b1, b0)) / 3 / N * 1e6
                bsw = sum(x[1] - y[1] for x, y in zip(b1, b0)) / 3 / N
                print(f"{label:7} {lt:15} p50 {lat[N//2]*1e3:.3f} ms  bookie CPU {bcpu:5.0f} us/add  vol.sw {bsw:.1f}  "
                      f"client CPU {(c1[0]-c0[0])/N*1e6:5.0f} us/add  vol.sw {(c1[1]-c0[1])/N:.1f}", flush=True)
                await w.close()
    trio.run(main)
finally:
    sb.send_signal(signal.SIGTERM)
    sb.wait(30)
    subprocess.run(["rm", "-rf", d])
