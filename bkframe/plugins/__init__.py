"""The built-in plugins: every plugin that needs no dependency beyond bkframe's own
(docs/plugins.md, "Built in, or a distribution of its own"), so that ``pip install
bkframe`` runs a bookie on its defaults.

They are registered exactly like third-party plugins, through the same hooks, and use only
the contracts (:mod:`bkframe.core`) and the storage kit (:mod:`bkframe.storage_kit`): the
default ledger storage (ledger_storage_default), the entry-log manager ``single``, the sqlite
and memory metadata stores, the ledger types (durability), placement policies, auth providers
and the filesystem tier. Plugins that need more (ZooKeeper, etcd, S3, Spark), and the two
reference storage plugins (the default journal ``journal_fs``, a dependency of bkframe, and
the entry-log manager ``per_ledger``), are distributions of their own under ``plugins/``.
"""
