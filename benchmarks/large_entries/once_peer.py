"""A peers.py plugin: bkframe-pd next to bkframe-pd-once (the same sandbox started with
``[ledger_storage] large_entry_bytes`` on) in one run; docs/benchmarks/large-entries.md, "Large entries
written once".

    LE_PEERS=bkframe-pd,bkframe-pd-once,bkframe-bypass BKFRAME_CHECKOUT=$PWD python3 \\
        ../shared/bench/peers.py --plugin benchmarks/large_entries/once_peer.py --systems bkframe-pd \\
        --sizes 65536 --counts 4000

The sandbox takes its bookie config from ``$BKFRAME_SANDBOX_CONFIG`` (``bkframe sandbox
--config``); this plugin sets it around each start. Peers: those of bkframe_peer.py plus
bkframe-pd-once, bkframe-pd-once-drop (also drop_synced_pages) and bkframe-pd-drop.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("BKFRAME_CHECKOUT", os.getcwd()), "..", "shared", "bench"))
import bkframe_peer

CONFIGS = {
    "on": '[ledger_storage]\nplugin = "default"\nlarge_entry_bytes = 16384\n',
    "on-drop": '[journal]\nplugin = "journal_fs"\ndrop_synced_pages = true\n\n[entry_log_manager]\nplugin = "single"\n'
    'drop_synced_pages = true\n\n[ledger_storage]\nplugin = "default"\nlarge_entry_bytes = 16384\n',
    "off-drop": '[journal]\nplugin = "journal_fs"\ndrop_synced_pages = true\n',
}


class ConfiguredPeer(bkframe_peer.BkframePeer):
    def __init__(self, short, config):
        super().__init__("PD_JOURNAL", short)
        self.config = config

    def start(self, workdir):
        path = os.path.join(workdir, "bookie.toml")  # the harness removes its workdir
        with open(path, "w") as f:
            f.write(CONFIGS[self.config])
        os.environ["BKFRAME_SANDBOX_CONFIG"] = path
        try:
            super().start(workdir)
        finally:
            del os.environ["BKFRAME_SANDBOX_CONFIG"]


def make_peers(args):
    every = {
        p.name: p
        for p in (
            *bkframe_peer.make_peers(args),
            ConfiguredPeer("pd-once", "on"),
            ConfiguredPeer("pd-once-drop", "on-drop"),
            ConfiguredPeer("pd-drop", "off-drop"),
        )
    }
    return [every[name] for name in os.environ.get("LE_PEERS", "bkframe-pd,bkframe-pd-once").split(",")]
