"""``python -m bkframe.testing.faults.bookie ARGS``: ``bkframe bookie ARGS`` with the test fault
layers the environment asks for installed first -- the power-loss layer
(``BKFRAME_POWERLOSS_*``, :mod:`.powerloss`), injected write failures
(``BKFRAME_WRITE_FAULTS``, :mod:`.write_faults`) and a disk of limited size
(``BKFRAME_DISKFULL_*``, :mod:`.filling_disk`), libfaketime's clock faults made usable for
Python (:mod:`.clocks`) -- and a small ``ulimit -n``
(``BKFRAME_RLIMIT_NOFILE``: the soft limit on open files, set before anything is opened).
``bkframe bookie`` itself never installs them.
:class:`bkframe.testing.cluster.BookieProcess` runs this by default.
"""

from __future__ import annotations

import os
import resource
import sys

from bkframe.testing.faults import clocks, filling_disk, powerloss, write_faults


def limit_open_files_from_env() -> None:
    limit = os.environ.get("BKFRAME_RLIMIT_NOFILE")
    if limit:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), hard))


def main() -> None:
    limit_open_files_from_env()
    powerloss.install_from_env()
    write_faults.install_from_env()
    filling_disk.install_from_env()
    clocks.install_from_env()
    from bkframe.cli.main import main as cli

    cli(["bookie", *sys.argv[1:]], prog_name="python -m bkframe.testing.faults.bookie")


if __name__ == "__main__":
    main()
