"""What needs both the bookie and the client: BP-46 repair of limbo ledgers (later:
autorecovery). The only package allowed to import both sides."""
