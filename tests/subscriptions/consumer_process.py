"""A consumer process for the kill tests: consumes LOG/SUB through the blocking client and
prints, flushed, one JSON line as it receives each record and one after its ack is durable.
Its client owns the subscription (docs/subscriptions.md), so killing it kills the owner too.

    python consumer_process.py METADATA_URI LOG SUB OWNER_TTL_S

When the subscription is owned elsewhere for longer than OWNER_TTL_S (this process was
fenced: another took it over), it prints ``{"lost": ...}`` and exits with status 3.
"""

from __future__ import annotations

import json
import sys

import bkframe
from bkframe.errors import NotOwnerError


def main() -> None:
    uri, log, sub, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    with bkframe.connect(uri, subscription_owner="local", subscription_owner_ttl_s=ttl, subscription_wait_s=ttl) as bk:
        try:
            with bk.logs.subscribe(log, sub, prefetch=2) as consumer:
                for msg in consumer:
                    line = {"position": str(msg.position), "count": msg.delivery_count, "key": (msg.key or b"").decode()}
                    print(json.dumps({"got": line}), flush=True)
                    msg.ack()
                    print(json.dumps({"acked": str(msg.position)}), flush=True)
        except NotOwnerError as e:
            print(json.dumps({"lost": str(e)}), flush=True)
            sys.exit(3)


if __name__ == "__main__":
    main()
