"""``jfr_top.py FILE.jfr [FILE.jfr ...]``: where a Spark JVM's sampled CPU went.

Java Flight Recorder samples threads running Java code (``jdk.ExecutionSample``; a thread in
native code -- a socket read, zstd-jni -- is sampled as ``jdk.NativeMethodSample`` and not
counted here). Prints the share of samples by thread (digits folded), by the frame on top
(self time) and by stage of the read (the first frame of the stack that names one of
:data:`STAGES`, from the top: the innermost stage a sample is in).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import Counter

#: Stages of a Spark read by the classes or methods their frames name (searched top down).
STAGES = (
    ("arrow: read the Python worker's stream", ("ArrowStreamReader", "MessageSerializer", "ReadChannel",
                                                 "VectorLoader", "ArrowReader", "PythonArrowOutput")),
    ("rows: Arrow columns into UnsafeRows", ("UnsafeProjection", "UnsafeWriter", "UnsafeRowWriter",
                                            "UnsafeArrayWriter", "ArrowColumnVector", "ColumnarBatchRow",
                                            "ColumnarMap", "ColumnarArray")),
    ("parquet: decode", ("parquet", "Parquet")),
    ("query: codegen (project, aggregate)", ("GeneratedClass", "GeneratedIterator", "BufferedRowIterator",
                                            "HashAggregate")),
    ("python runner: send partition, sockets", ("PythonRunner", "PythonWorker", "BasePythonRunner")),
    ("memory, GC, JIT", ("MemoryManager", "Unsafe.copyMemory", "Platform.copyMemory")),
)


def samples(path: str) -> list[tuple[str, list[str]]]:
    """(thread, frames top down as ``Class.method``) of each execution sample in ``path``."""
    out = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample", path],
        check=True, capture_output=True, text=True,
    ).stdout
    events = json.loads(out)["recording"]["events"]
    found = []
    for e in events:
        v = e["values"]
        thread = (v.get("sampledThread") or {}).get("javaName") or "?"
        frames = [
            f"{f['method']['type']['name']}.{f['method']['name']}" for f in (v.get("stackTrace") or {}).get("frames", [])
        ]
        found.append((re.sub(r"\d+", "N", thread), frames))
    return found


def stage(frames: list[str]) -> str:
    for frame in frames:
        for name, marks in STAGES:
            if any(m in frame for m in marks):
                return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    found = [s for f in args.files for s in samples(f)]
    total = len(found) or 1
    print(f"{len(found)} samples")
    for title, counts in (
        ("thread", Counter(t for t, _ in found)),
        ("stage", Counter(stage(frames) for _, frames in found)),
        ("top frame", Counter(frames[0] if frames else "?" for _, frames in found)),
    ):
        print(f"\nby {title}:")
        for name, n in counts.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
