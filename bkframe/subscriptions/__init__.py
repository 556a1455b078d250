"""Subscriptions: a log's records spread over a fleet of consumers (docs/subscriptions.md).

- :mod:`.settings`: what a subscription is (kind, lease time, dead letters) and its record;
- :mod:`.state`: the state and every decision on it, without I/O (sans-IO);
- :mod:`.journal`: the state's durable form (events and snapshots in state ledgers);
- :mod:`.owner`: what a consumer asks of a subscription's owner (the interface the wire and
  the in-process path both serve);
- :mod:`.dispatcher`: the owner: elected, fenced, reading the log ahead of the consumers;
- :mod:`.consumer`: the consumer's API (``async for msg in sub: await msg.ack()``).
"""
