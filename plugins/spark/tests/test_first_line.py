"""What a Spark user sees of a mistake in the options: bkframe's message is the first line of
the error Spark raises (before, it was the last line of a 5-40 line Python traceback); and
``local_session()`` listens on loopback only."""

from __future__ import annotations

import psutil
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


#: Option errors come before the store is opened: no cluster is needed.
NOWHERE = "sqlite:///nowhere/metadata.db"


def test_an_option_error_is_the_first_line(spark: SparkSession) -> None:
    for options, says in [
        ({"log": "x", "lgo": "y"}, "unknown option(s) ['lgo'] for format 'bkframe'"),
        ({"startingPosition": "abc", "log": "x"}, "option 'startingPosition': bad position 'abc'"),
        ({"startingPosition": "0:0", "startingTimestamp": "5", "log": "x"},
         "give option 'startingPosition' or option 'startingTimestamp', not both"),
    ]:
        read = spark.read.format("bkframe").option("metadata", NOWHERE)
        for key, value in options.items():
            read = read.option(key, value)
        with pytest.raises(AnalysisException) as caught:
            read.load().collect()
        first = str(caught.value).splitlines()[0]
        assert says in first and "Traceback" not in first, str(caught.value)


def test_a_local_session_listens_on_loopback_only(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == conf.get("spark.driver.host") == "127.0.0.1"
    jvm = psutil.Process(spark.sparkContext._gateway.proc.pid)  # type: ignore[union-attr]
    listening = {c.laddr.ip for c in jvm.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    assert listening and listening <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, listening
