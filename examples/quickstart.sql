-- connectql quickstart: generate 100,000 orders into a stream, copy the big ones to Parquet
-- files, then look at what happened. Runs on the embedded defaults (no servers needed) and
-- ends by itself because every connector uses run = 'once' (a batch job).

CREATE SOURCE CONNECTOR IF NOT EXISTS orders_gen FROM datagen INTO demo_orders
WITH (
  'rows.total' = 100000,
  fields = "id BIGINT SEQUENCE, customer INT RANDOM(1, 500), amount DOUBLE RANDOM(1, 1000),
            status STRING CHOICE('new', 'paid', 'shipped'), created_at TIMESTAMP NOW",
  seed = 42,
  'tasks.max' = 2,
  run = once
);

-- A sink with a transform: only paid orders over 500, amount in cents.
CREATE SINK CONNECTOR IF NOT EXISTS big_orders TO file
AS SELECT id, customer, CAST(amount * 100 AS BIGINT) AS cents, created_at
   FROM demo_orders WHERE status = 'paid' AND amount > 500
WITH (path = '.connectql/out/big_orders', format = 'parquet', run = 'once');

-- rows_total: rows read; rows_written: rows that reached the stream or the files
SELECT name, kind, type, state, rows_total, rows_written, last_error
FROM connectors ORDER BY kind DESC;

SELECT status, count(*) AS orders, round(avg(amount), 2) AS avg_amount
FROM demo_orders GROUP BY status ORDER BY status;

DESCRIBE STREAM demo_orders;
