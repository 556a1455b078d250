"""The soak: the fault suite's harness on 30 bookies for minutes (``python -m tests.soak``)."""
