"""Throughput and latency with TLS on vs off, in one run, on two sandboxes side by side.

    .venv/bin/python benchmarks/tls_overhead.py [--rounds 3] [--root /tmp/bkframe-tls-bench]

Makes a CA and certificates (trustme), starts two ``bkframe sandbox --bookies 3`` clusters --
one plaintext, one with ``[tls] enabled`` and ``require_client_cert`` plus token auth (the
config it writes next to them) -- then per round and entry size runs ``bkframe bench appends
--metadata ...`` (PD_JOURNAL, E=3 W=3 A=2, window 256) against each, alternating which goes
first. Prints one JSON line per run and a table of medians; removes everything it made.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trustme

SIZES = ((1024, 50_000), (65536, 2_000))


def make_certs(root: Path) -> dict[str, str]:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    bookie = ca.issue_cert("127.0.0.1")
    bookie.cert_chain_pems[0].write_to_path(str(root / "bookie.pem"))
    bookie.private_key_pem.write_to_path(str(root / "bookie.key"))
    client = ca.issue_cert("bench@example.com", common_name="bench")
    client.cert_chain_pems[0].write_to_path(str(root / "client.pem"))
    client.private_key_pem.write_to_path(str(root / "client.key"))
    (root / "token").write_text("bench-token\n")
    (root / "tls.toml").write_text(
        f'[tls]\nenabled = true\ncert = "{root / "bookie.pem"}"\nkey = "{root / "bookie.key"}"\n'
        f'ca = "{root / "ca.pem"}"\nrequire_client_cert = true\n\n[auth]\nprovider = "token"\ntokens = ["bench-token"]\n'
    )
    return {
        "--tls-ca": str(root / "ca.pem"),
        "--tls-cert": str(root / "client.pem"),
        "--tls-key": str(root / "client.key"),
        "--auth-token-file": str(root / "token"),
    }


def start_sandbox(data_dir: Path, config: Path | None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bkframe", "sandbox", "--bookies", "3", "--data-dir", str(data_dir)]
    if config is not None:
        cmd += ["--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("running"):
            return proc
    raise SystemExit(f"sandbox in {data_dir} did not start")


def bench(metadata: str, size: int, count: int, extra: list[str]) -> dict[str, float]:
    cmd = [
        sys.executable, "-m", "bkframe", "bench", "--metadata", metadata, "-e", "3", "-w", "3", "-a", "2",
        "--entry-size", str(size), "--count", str(count), "--window", "256", "--json", *extra,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path("/tmp/bkframe-tls-bench"))
    args = parser.parse_args()
    root: Path = args.root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    client_tls = make_certs(root)
    flags = [x for kv in client_tls.items() for x in kv]
    sandboxes = {
        "plain": (start_sandbox(root / "plain", None), f"sqlite://{root / 'plain' / 'metadata.db'}", []),
        "tls": (start_sandbox(root / "tls", root / "tls.toml"), f"sqlite://{root / 'tls' / 'metadata.db'}", flags),
    }
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for r in range(args.rounds):
            order = ["plain", "tls"] if r % 2 == 0 else ["tls", "plain"]
            for size, count in SIZES:
                for name in order:
                    _, metadata, extra = sandboxes[name]
                    got = bench(metadata, size, count, extra)
                    results.setdefault((name, size), []).append(got)
                    print(json.dumps({"round": r, "tls": name == "tls", **got}), flush=True)
                    time.sleep(1)
    finally:
        for proc, _, _ in sandboxes.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    # The machine's load moves between rounds: each round's TLS run is judged against the
    # plaintext run next to it (the ratio), as well as by medians over all rounds.
    print("| entry B | TLS | entries/s (median) | MB/s | p50 ms | p99 ms | runs | TLS / plain entries/s per round |")
    print("|---|---|---|---|---|---|---|---|")
    for size, _ in SIZES:
        pairs = zip(results[("tls", size)], results[("plain", size)], strict=True)
        ratios = [t["entries_per_s"] / q["entries_per_s"] for t, q in pairs]
        for name in ("plain", "tls"):
            runs = results[(name, size)]
            med = {k: statistics.median(run[k] for run in runs) for k in ("entries_per_s", "mb_per_s", "p50_ms", "p99_ms")}
            shown = ", ".join(f"{r:.2f}" for r in ratios) + f" (median {statistics.median(ratios):.2f})"
            print(
                f"| {size} | {'on' if name == 'tls' else 'off'} | {med['entries_per_s']:,.0f} | {med['mb_per_s']:.1f} | "
                f"{med['p50_ms']:.2f} | {med['p99_ms']:.2f} | {len(runs)} | {shown if name == 'tls' else ''} |"
            )


if __name__ == "__main__":
    main()
