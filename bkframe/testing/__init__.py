"""The plugin author's test kit, shipped with bkframe (``bkframe[testing]``): the contract
suites (``*_contract``: journal, ledger storage, tier, metadata store, multi-log store,
autorecovery, placement policy, auth provider; they run under trio wherever they are
subclassed, :mod:`.trio_contracts`), the pytest plugin and its fixtures (:mod:`.pytest_plugin`: clusters,
ZooKeeper, etcd and S3 servers), :mod:`.kit` (``wait_until``, ``missing``, passwords,
payloads), :mod:`.cluster` and :mod:`.servers`. docs/plugins.md, "Testing a plugin", is the
guide.

Fault tooling -- fault layers, small filesystems, simulated hosts, the link proxy -- is
bkframe's own and lives apart, in :mod:`bkframe.testing.faults`.
"""
