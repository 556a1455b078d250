"""What the bookie, the client and the tools share that is neither a plugin contract
(:mod:`bkframe.core`) nor the wire (:mod:`bkframe.proto`): the check that a metadata store
holds a cluster, made on purpose (cluster_record), and many awaits with a few in flight (bounded).
"""
