"""Found by Spark >= 4 on the Python path (a ``pyspark_*`` module with a ``DefaultSource``,
SPARK-45917): ``spark.read.format("bkframe")`` works with no registration call."""

from bkframe_spark.source import BkframeDataSource as DefaultSource

__all__ = ["DefaultSource"]
