"""CPU per message of the add path's protocol work, without I/O: the client encoding a
one-entry ADD_BATCH frame, the bookie taking it out of a FrameBuffer and decoding it, the
bookie encoding the answer, the client taking that out of a FrameBuffer and decoding it.

    .venv/bin/python benchmarks/latency/proto_costs.py [ROUNDS]

Prints microseconds per message for each step, the best of ROUNDS (default 5) rounds of
20,000 (the best: these shared machines only ever add time). Under BKFRAME_PURE_PYTHON=1
it times the pure-Python modules where compiled ones are built.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from bkframe.proto.codes import Status
from bkframe.proto.frames import FrameBuffer, pack_frame
from bkframe.proto.ops.add_batch import encode_add_batch, encode_add_batch_response
from bkframe.proto.table import decode_requests, decode_responses

KEY = b"k" * 20
DATA = b"x" * 1024
COUNT = 20_000


def per_message(fn: Callable[[], object], rounds: int) -> float:
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(COUNT):
            fn()
        best = min(best, (time.perf_counter() - start) / COUNT)
    return best * 1e6


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    request = pack_frame(encode_add_batch(7, 3, 5, 1, KEY, [6], [DATA]))
    answer = pack_frame([encode_add_batch_response(7, Status.OK, 3, 1, 5)])
    bookie_frames = FrameBuffer()
    client_frames = FrameBuffer()

    def bookie_decode() -> object:
        bookie_frames.feed(request)
        body = bookie_frames.next_frame()
        assert body is not None
        return decode_requests(body, 1 << 20)

    def client_decode() -> object:
        client_frames.feed(answer)
        body = client_frames.next_frame()
        assert body is not None
        return decode_responses(body)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("client encodes an ADD_BATCH of one entry", lambda: pack_frame(encode_add_batch(7, 3, 5, 1, KEY, [6], [DATA]))),
        ("bookie frames and decodes it", bookie_decode),
        ("bookie encodes the answer", lambda: pack_frame([encode_add_batch_response(7, Status.OK, 3, 1, 5)])),
        ("client frames and decodes the answer", client_decode),
    ]
    for name, fn in steps:
        print(f"{name}: {per_message(fn, rounds):.2f} µs")


if __name__ == "__main__":
    main()
