"""The Spark JDBC yardstick of bench.bulk, run as its own fresh Python process: a SparkSession
with Debian's JDBC jars, then the same table copied with Spark's own JDBC reader and writer
into each target in turn (the first copy is the fresh-process figure, the next ones warm).

    python -m bench.jdbccopy SPEC_JSON

SPEC_JSON: {"source": {"url", "user", "password", "table"}, "targets": [{"url", "user",
"table"}, ...], "partitions": n, "lower": k, "upper": k}. Prints one JSON line per copy:
{"copy": i, "start": epoch s, "end": epoch s}, after a {"session": epoch s} line."""

from __future__ import annotations

import json
import os
import sys
import time

JARS = ("/usr/share/java/mariadb-java-client.jar", "/usr/share/java/postgresql.jar")
DRIVERS = {"mysql": "org.mariadb.jdbc.Driver", "postgresql": "org.postgresql.Driver"}


def driver(url: str) -> str:
    """The driver class of a jdbc: URL (DriverManager does not see spark.jars' drivers). MariaDB
    goes by jdbc:mysql:, which MariaDB Connector/J 2 takes and which gives Spark's MySQL dialect
    (backtick quoting)."""
    return DRIVERS[url.split(":")[1]]


def session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[*]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.jars", ",".join(JARS))
        .getOrCreate()
    )


def copy(spark, spec: dict, target: dict) -> None:
    src = spec["source"]
    frame = (
        spark.read.format("jdbc")
        .option("url", src["url"])
        .option("driver", driver(src["url"]))
        .option("dbtable", src["table"])
        .option("user", src["user"])
        .option("password", src.get("password", ""))
        .option("partitionColumn", "id")
        .option("lowerBound", spec["lower"])
        .option("upperBound", spec["upper"])
        .option("numPartitions", spec["partitions"])
        .option("fetchsize", 10_000)
        .option("preferTimestampNTZ", "true")  # datetime/timestamp without zone, unshifted
        .load()
    )
    (
        frame.write.format("jdbc")
        .option("url", target["url"])
        .option("driver", driver(target["url"]))
        .option("dbtable", target["table"])
        .option("user", target["user"])
        .option("batchsize", 10_000)
        .option("rewriteBatchedStatements", "true")
        .mode("append")
        .save()
    )


def main() -> int:
    spec = json.loads(sys.argv[1])
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"session": time.time()}), flush=True)
    for i, target in enumerate(spec["targets"]):
        start = time.time()
        copy(spark, spec, target)
        print(json.dumps({"copy": i, "start": start, "end": time.time()}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
