"""bkframe's Spark connector: the PySpark data source ``bkframe`` (Spark >= 4.2).

Batch reads of logs (one, a list or a pattern) or of ledgers (a consistent snapshot of
confirmed entries), bulk loads (one ledger per task and log, made visible by one idempotent
commit; rows routed by a ``log`` column land in all their logs at once), a streaming source
whose offsets are a position per log, and an exactly-once streaming sink; offloaded segments
are read from their tier's objects, and :func:`read_log` has Spark's own Parquet reader read
those of a ``file://`` tier. See docs/spark.md.
"""

from bkframe_spark.options import OptionError, Options
from bkframe_spark.parquet_reads import read_log
from bkframe_spark.source import FORMAT, BkframeDataSource

__all__ = ["FORMAT", "BkframeDataSource", "OptionError", "Options", "read_log", "register"]


def register(spark: object) -> None:
    """``spark.dataSource.register(BkframeDataSource)`` -- only needed where the
    ``pyspark_bkframe`` module is not on the workers' Python path."""
    spark.dataSource.register(BkframeDataSource)  # type: ignore[attr-defined]
