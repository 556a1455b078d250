"""A ZooKeeper or etcd server for ``bkframe bench scale metadata`` at 10^6 ledgers, started
as the test servers are (bkframe.testing.servers: Debian's packages, a free loopback port,
its data under DIR), with what a store of that size needs, until SIGINT / SIGTERM; then
it is stopped and DIR deleted.

    python benchmarks/scaling/metadata_server.py zk   /tmp/bench-zk     # prints zk://127.0.0.1:PORT/bench-1m
    python benchmarks/scaling/metadata_server.py etcd /tmp/bench-etcd   # prints etcd://127.0.0.1:PORT/bench-1m

ZooKeeper: heap ZK_HEAP (default 6g; about 4.2x10^6 znodes: the ledgers, three index nodes
each, the logs), G1 and the full JIT (the test servers' serial collector and quick
compiler are for servers that live minutes). etcd: ``--quota-backend-bytes`` ETCD_QUOTA
(default 8 GiB, etcd's suggested maximum; the default 2 GiB is about what 10^6 ledgers'
keys take) and the test servers' auto-compaction. Every 60 s it prints the server's
resident memory and the size of DIR.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bkframe.testing.servers import EtcdServer, ZooKeeperServer

kind, root = sys.argv[1], Path(sys.argv[2])
if root.exists():
    sys.exit(f"{root} exists: give a new directory (it is deleted at the end)")
root.mkdir(parents=True)
server: ZooKeeperServer | EtcdServer
if kind == "zk":
    server = ZooKeeperServer(root, jvm_options=(f"-Xmx{os.environ.get('ZK_HEAP', '6g')}",))
elif kind == "etcd":
    server = EtcdServer(root, quota_backend_bytes=int(os.environ.get("ETCD_QUOTA", str(8 * 2**30))))
else:
    sys.exit("kind: zk or etcd")

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())
started = time.monotonic()
server.start()
print(f"{kind}://{server.address}/bench-1m", flush=True)
try:
    while not stop.wait(60):
        assert server.proc is not None
        rss = Path(f"/proc/{server.proc.pid}/status").read_text().split("VmRSS:")[1].split()[0]
        du = subprocess.run(["du", "-sm", str(root)], capture_output=True, text=True).stdout.split()[0]
        print(f"{time.monotonic() - started:.0f} s: server RSS {int(rss) // 1024} MB, {root} {du} MB", flush=True)
finally:
    server.stop()
    shutil.rmtree(root)
