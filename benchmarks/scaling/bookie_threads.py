"""Where one bookie saturates (docs/scaling.md): start one bookie, drive it with N
``bkframe bench appends`` clients (one ledger each), and report the bookie's CPU per thread (from
/proc/PID/task/*/stat over the benchmark's seconds), its threads' states sampled every 5 ms
and the disk's busy time.

    python benchmarks/scaling/bookie_threads.py ENTRY_SIZE COUNT CLIENTS [BOOKIE_TOML]   # WINDOW=1024
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

VENV = str(Path(sys.executable).parent)
size = int(sys.argv[1])
count = int(sys.argv[2])
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 1
config = sys.argv[4] if len(sys.argv) > 4 else None
window = int(os.environ.get("WINDOW", "1024"))
data = Path(tempfile.mkdtemp(prefix="mc-sat-", dir=os.environ.get("TMPDIR", "/tmp")))
cmd = [f"{VENV}/bkframe", "bookie", "--data-dir", str(data), "--port", "0"]
if config:
    cmd += ["--config", config]
bk = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
port = None
for line in bk.stdout:
    m = re.search(r"listening on ([\d.]+):(\d+)", line)
    if m:
        port = int(m.group(2))
        break
threading.Thread(target=lambda: [None for _ in bk.stdout], daemon=True).start()
tick = os.sysconf("SC_CLK_TCK")


def threads():
    out = {}
    for t in Path(f"/proc/{bk.pid}/task").iterdir():
        try:
            st = (t / "stat").read_text()
            name = (t / "comm").read_text().strip()
        except OSError:
            continue
        f = st[st.rindex(")") + 2 :].split()
        out[t.name] = (name, int(f[11]) + int(f[12]))
    return out


def disk():
    tot = 0
    for row in open("/proc/diskstats"):
        f = row.split()
        if re.fullmatch(r"(sd[a-z]|vd[a-z]|nvme\d+n\d+|xvd[a-z])", f[2]):
            tot += int(f[12])
    return tot



r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
states = {}
stop = False


def sampler():
    while not stop:
        for t in Path(f"/proc/{bk.pid}/task").iterdir():
            try:
                st = (t / "stat").read_text()
                name = "main" if t.name == str(bk.pid) else (t / "comm").read_text().strip()
            except OSError:
                continue
            c = st[st.rindex(")") + 2]
            d = states.setdefault(name, {})
            d[c] = d.get(c, 0) + 1
        time.sleep(0.005)


threading.Thread(target=sampler, daemon=True).start()
t0 = threads()
d0 = disk()
w0 = time.time()
procs = [
    subprocess.Popen(
        [
            f"{VENV}/bkframe",
            "bench",
            "--bookie",
            f"127.0.0.1:{port}",
            "--ledger",
            str(i + 1),
            "--entry-size",
            str(size),
            "--count",
            str(count),
            "--window",
            str(window),
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    for i in range(clients)
]
try:
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
except Exception:
    bk.kill()
    raise
stop = True
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
client_cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
t1 = threads()
d1 = disk()
el = time.time() - w0
bk.terminate()
bk.wait()
shutil.rmtree(data)
agg = {}
for tid, (name, cpu) in t1.items():
    c = cpu - t0.get(tid, (name, 0))[1]
    key = "main" if tid == str(bk.pid) else name
    agg[key] = agg.get(key, 0) + c
print(
    json.dumps(
        {
            "size": size,
            "clients": clients,
            "eps": sum(o.get("entries_per_s", 0) for o in outs),
            "mbps": sum(o.get("mb_per_s", 0) for o in outs),
            "p50_ms": [o.get("p50_ms") for o in outs],
            "bench_s": round(max(o["seconds"] for o in outs), 2),
            "bookie_cpu_pct": {k: round(100 * v / tick / max(o["seconds"] for o in outs)) for k, v in agg.items() if v},
            "clients_cpu_pct_of_bench_s": round(100 * client_cpu / max(o["seconds"] for o in outs)),
            "thread_states": {k: {c: round(100 * n / sum(v.values())) for c, n in v.items()} for k, v in states.items()},
            "in_group_write_pct": round(
                100
                * sum(v for k, d in states.items() if k.startswith("_write_group") for v in d.values())
                / max(1, sum(states["main"].values()))
            ),
            "fsyncs_per_s": round(sum(o["fsyncs_per_s"] for o in outs)),
            "disk_busy_pct": round(100 * (d1 - d0) / 1000 / max(o["seconds"] for o in outs)),
        }
    )
)
print([{k: o[k] for k in o if k not in ("latencies",)} for o in outs][:1], file=sys.stderr)
