"""The client's side of bookies: a pipelined connection to one bookie (its transports on
asyncio and on the raw socket, each request's pending answer, the errors about a bookie),
the pool that opens and reopens them by bookie id, which bookies failed lately (quarantine),
and the registered bookies as the client lists and caches them."""
