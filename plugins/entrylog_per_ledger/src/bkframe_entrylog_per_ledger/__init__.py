"""The entry-log manager ``per_ledger``: one entry log per ledger, sealed on a BP-32 write
close, on expiry or when too many are open. The plugin module registers it.
"""
