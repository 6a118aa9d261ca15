"""Reads `attempts` tables with Spark, DuckDB and polars, as a lake user would, for tests/lake.rs.

Usage: engines.py OUTPUT_DIR...   (each the --output of a replay; its attempts/ table is read)

Prints one JSON object: for each output directory (in argument order) and each engine, what the
engine made of the table: the column types it read, the rows' keys, the sums of the money
columns as exact decimal strings, the range of event_time in microseconds since 1970, and how
many rows have an event_time outside their `date` partition. tests/lake.rs compares them with
what the collector wrote. Spark runs with its default read settings, so the table must be
readable the way every Spark user reads it.

Exits 3 naming the missing module when an engine is not installed.
"""

import json
import sys

try:
    import duckdb
    import polars as pl
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
except ImportError as missing:
    sys.stderr.write(f"{missing}\n")
    sys.exit(3)

MONEY = ["estimated_incremental_usd", "planned_attempt_usd", "actual_attempt_usd"]
MICROS_PER_DAY = 86_400_000_000


def text(value):
    """A decimal sum as plain digits (str() may give "0E-18"); None (all null) stays None."""
    return None if value is None else format(value, "f")


def spark_read(spark, output):
    df = spark.read.parquet(output + "/attempts")
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    money = [F.sum(c).alias(c) for c in MONEY]
    retries = F.sum(
        F.when(F.col("attempt_index") > 0, F.col("estimated_incremental_usd"))
    ).alias("retry_incremental_usd")
    micros = F.unix_micros(F.col("event_time"))
    day = F.datediff(F.col("date"), F.lit("1970-01-01").cast("date"))
    outside = F.sum(F.when(F.floor(micros / MICROS_PER_DAY) != day, 1).otherwise(0))
    agg = df.agg(
        F.count(F.lit(1)).alias("rows"),
        *money,
        retries,
        F.min(micros).alias("min_micros"),
        F.max(micros).alias("max_micros"),
        outside.alias("outside_partition"),
    ).collect()[0]
    keys = df.select("trace_id", "span_id", "attempt_index").collect()
    return {
        "types": types,
        "rows": agg["rows"],
        "keys": sorted([r[0], r[1], r[2]] for r in keys),
        "sums": {c: text(agg[c]) for c in MONEY + ["retry_incremental_usd"]},
        "min_micros": agg["min_micros"],
        "max_micros": agg["max_micros"],
        "outside_partition": agg["outside_partition"],
    }


def duckdb_read(output):
    con = duckdb.connect()
    table = f"read_parquet('{output}/attempts/**/*.parquet', hive_partitioning = true)"
    relation = con.sql(f"SELECT * FROM {table}")
    types = dict(zip(relation.columns, (str(t) for t in relation.types)))
    sums = ", ".join(f"sum({c})" for c in MONEY)
    row = con.sql(
        f"""SELECT count(*), {sums},
                   sum(estimated_incremental_usd) FILTER (WHERE attempt_index > 0),
                   min(epoch_us(event_time)), max(epoch_us(event_time)),
                   count(*) FILTER (WHERE epoch_us(event_time) // {MICROS_PER_DAY}
                                          <> date - DATE '1970-01-01')
            FROM {table}"""
    ).fetchall()[0]
    keys = con.sql(f"SELECT trace_id, span_id, attempt_index FROM {table}").fetchall()
    return {
        "types": types,
        "rows": row[0],
        "keys": sorted(list(k) for k in keys),
        "sums": {c: text(v) for c, v in zip(MONEY + ["retry_incremental_usd"], row[1:5])},
        "min_micros": row[5],
        "max_micros": row[6],
        "outside_partition": row[7],
    }


def polars_read(output):
    lazy = pl.scan_parquet(output + "/attempts", hive_partitioning=True)
    types = {name: str(t) for name, t in lazy.collect_schema().items()}
    micros = pl.col("event_time").dt.epoch("us")
    day = pl.col("date").cast(pl.Int32)
    frame = lazy.select(
        pl.len().alias("rows"),
        *[pl.col(c).sum() for c in MONEY],
        pl.col("estimated_incremental_usd")
        .filter(pl.col("attempt_index") > 0)
        .sum()
        .alias("retry_incremental_usd"),
        micros.min().alias("min_micros"),
        micros.max().alias("max_micros"),
        (micros.floordiv(MICROS_PER_DAY) != day).sum().alias("outside_partition"),
    ).collect()
    row = frame.row(0, named=True)
    keys = lazy.select("trace_id", "span_id", "attempt_index").collect().rows()
    return {
        "types": types,
        "rows": row["rows"],
        "keys": sorted(list(k) for k in keys),
        "sums": {c: text(row[c]) for c in MONEY + ["retry_incremental_usd"]},
        "min_micros": row["min_micros"],
        "max_micros": row["max_micros"],
        "outside_partition": row["outside_partition"],
    }


def main(outputs):
    # One session for every table: Spark's start costs seconds. Local, no UI or progress bars,
    # few shuffle partitions (the tables are small); nothing that changes how Parquet is read.
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("retry-spend-lake-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        result = [
            {
                "spark": spark_read(spark, output),
                "duckdb": duckdb_read(output),
                "polars": polars_read(output),
            }
            for output in outputs
        ]
    finally:
        spark.stop()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
