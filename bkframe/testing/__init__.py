"""Test support shipped with bkframe, for its own tests and for plugin authors."""
