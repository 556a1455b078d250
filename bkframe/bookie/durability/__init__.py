"""What makes an entry a bookie acknowledged survive: the journal's records and their replay,
checkpoints (LastLogMark), large entries written once, the BP-14 sync cursor, tombstones of
deleted ledgers, and BP-46's boot protection (fencing and limbo after possible data loss)."""
