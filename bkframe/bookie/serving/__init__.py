"""The bookie's network side: the TCP server (frames in, response batches out, a graceful
drain), each connection's reader and outbox, the handshake (TLS, then AUTH), and what one
client or many may make it hold (connection caps, in-flight memory). What the requests do
is the bookie's own (:mod:`bkframe.bookie.requests` and the handlers it dispatches to)."""
