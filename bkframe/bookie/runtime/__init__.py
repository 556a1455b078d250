"""What runs beside serving while a bookie is up: periodic work that retries (checkpoints,
garbage collection), the garbage collector, read-only mode (disk usage), what holds the event
loop (loop lag, Python's GC), and warnings a flood cannot turn into a flood of lines."""
