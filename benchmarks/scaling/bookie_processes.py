"""1 vs N bookie processes with the same client load: bkframe sandbox --bookies N, then C bench
clients through the client library (E=N, W=1, A=1: each entry on one bookie, striped).

    python benchmarks/scaling/bookie_processes.py BOOKIES ENTRY_SIZE COUNT CLIENTS   # WINDOW=256 TYPE=PD_JOURNAL
"""

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VENV = str(Path(sys.executable).parent)
n = int(sys.argv[1])
size = int(sys.argv[2])
count = int(sys.argv[3])
clients = int(sys.argv[4])
window = int(os.environ.get("WINDOW", "256"))
typ = os.environ.get("TYPE", "PD_JOURNAL")
w = int(os.environ.get("W", "1"))
data = Path(tempfile.mkdtemp(prefix=f"mc-sb{n}-", dir=os.environ.get("TMPDIR", "/tmp")))
sb = subprocess.Popen(
    [f"{VENV}/bkframe", "sandbox", "--bookies", str(n), "--data-dir", str(data)],
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
)
try:
    for line in sb.stdout:
        if line.startswith("running;"):
            break
    state = json.loads((data / "sandbox.json").read_text())
    pids = [b["pid"] for b in state["bookies"]]
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(pid):
        st = Path(f"/proc/{pid}/stat").read_text()
        f = st[st.rindex(")") + 2 :].split()
        return (int(f[11]) + int(f[12])) / tick

    c0 = [cpu(p) for p in pids]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [
        subprocess.Popen(
            [
                f"{VENV}/bkframe",
                "bench",
                "--metadata",
                state["metadata"],
                "-e",
                str(n),
                "-w",
                str(w),
                "-a",
                str(w),
                "--type",
                typ,
                "--entry-size",
                str(size),
                "--count",
                str(count),
                "--window",
                str(window),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(clients)
    ]
    outs = []
    for p in procs:
        o, e = p.communicate()
        if p.returncode:
            print(e[-2000:], file=sys.stderr)
        outs.append(json.loads(o.strip().splitlines()[-1]))
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c1 = [cpu(p) for p in pids]
    secs = max(o["seconds"] for o in outs)
    print(
        json.dumps(
            {
                "bookies": n,
                "size": size,
                "clients": clients,
                "type": typ,
                "w": w,
                "eps": round(sum(o["entries_per_s"] for o in outs)),
                "mbps": round(sum(o["mb_per_s"] for o in outs), 1),
                "p50_ms": [round(o["p50_ms"], 2) for o in outs],
                "seconds": round(secs, 2),
                "bookie_cpu_pct": [round(100 * (b - a) / secs) for a, b in zip(c0, c1)],
                "clients_cpu_pct": round(100 * (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / secs),
            }
        )
    )
finally:
    sb.terminate()
    sb.wait(timeout=60)
    shutil.rmtree(data, ignore_errors=True)
