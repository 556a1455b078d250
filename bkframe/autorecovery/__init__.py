"""Autorecovery, and what else needs both the bookie and the client: the auditor (which
bookies are lost, which ledgers are under-replicated), replication workers (copying a lost
bookie's entries to a new one), ledger check, BP-46 repair of limbo ledgers (data
integrity), and the service that runs them (:mod:`.service`). The only package allowed to
import both sides. Tiered storage's offload service, which the service also runs, lives
with the rest of tiering (:mod:`bkframe.tiering`)."""
