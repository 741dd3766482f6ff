"""Options every connector has (DESIGN.md, "Options every connector has")."""

from __future__ import annotations

from connectql.config import Option

SOURCE_COMMON = {
    o.name: o
    for o in [
        Option(
            "connector", doc="the connector type, when not given as FROM/TO type (ksqlDB style)"
        ),
        Option(
            "stream",
            doc="a source's target stream (same as INTO); a sink's input stream"
            " (same as FROM stream)",
        ),
        Option(
            "tasks.max",
            "int",
            1,
            doc="parallelism: a source's input partitions per micro-batch (datagen's rows;"
            " a database source's snapshot chunk or poll range on one integer key; a change-log"
            " batch is one partition); the file source refuses it above 1 (Spark splits files"
            " itself)",
        ),
        Option(
            "trigger.interval",
            "duration",
            doc="micro-batch interval, e.g. '500 milliseconds'; default: as fast as data arrives",
        ),
        Option(
            "run",
            "enum",
            "continuous",
            choices=("continuous", "once"),
            doc="'continuous', or 'once': process what is there now, then stop (batch)",
        ),
        Option(
            "errors.tolerance",
            "enum",
            "none",
            choices=("none", "all"),
            doc="'none': a bad record fails the connector; 'all': it goes to the dead-letter"
            " stream and the connector goes on; refused where no bad record can occur (datagen,"
            " the file and s3 sinks, toolkit sinks that reject no row)",
        ),
        Option(
            "errors.deadletter.stream",
            doc="stream that receives bad records (with connector, stage, source offset, error"
            " and the raw record); needed with errors.tolerance = 'all', refused without it",
        ),
        Option(
            "errors.retry.max",
            "int",
            10,
            doc="restarts after a failure before the connector is FAILED",
        ),
        Option(
            "errors.retry.backoff.ms",
            "int",
            1000,
            doc="wait before the first restart; doubles per attempt up to 60000",
        ),
        Option(
            "call.timeout.ms",
            "int",
            30000,
            doc="toolkit connectors: how long a call to the connector's own code at CREATE,"
            " ALTER, EXPLAIN or a start (its check, tables, schema, ...) may take before the"
            " statement fails naming the call; the worker and other connectors go on",
        ),
        Option(
            "stall.timeout.ms",
            "int",
            60000,
            doc="STALLED when no progress this long while the source has newer data, or when a"
            " batch has been running this long (e.g. waiting on a server that does not answer)",
        ),
        Option(
            "initial.state",
            "enum",
            "running",
            choices=("running", "paused"),
            doc="'running', or 'paused': create without starting; CREATE only (ALTER refuses"
            " it: use PAUSE or RESUME CONNECTOR)",
        ),
    ]
}

SINK_COMMON = {
    **SOURCE_COMMON,
    "tasks.max": Option(
        "tasks.max",
        "int",
        doc="the most writer tasks per micro-batch (Spark splits a batch's stream files without"
        " a shuffle); absent: no cap, about one task per core",
    ),
}
