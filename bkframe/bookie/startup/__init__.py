"""What a bookie checks and claims before it serves: its ports and data dir (preflight), who
it is and where others reach it (identity: its id, its advertised address), and the cookies
and marks of its data dir (BP-46: whether the disk was replaced, whether the last shutdown
was clean). :mod:`bkframe.bookie.service` runs these steps in order."""
