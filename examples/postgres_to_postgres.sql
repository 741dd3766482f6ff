-- Keep a copy of a PostgreSQL table (shop.public.orders) in another table, in real time:
-- a snapshot, then every change from the write-ahead log (logical decoding).
-- Setup (wal_level = logical, the table): README, section "PostgreSQL". Host, port and user
-- come from PGHOST, PGPORT and PGUSER (the variables psql reads), with the defaults written
-- after ':-'; the password from PGPASSWORD, as psql does.

CREATE SOURCE CONNECTOR IF NOT EXISTS pg_orders_cdc FROM postgres INTO pg_orders WITH (
  host = ${env:PGHOST:-127.0.0.1}, port = ${env:PGPORT:-5432}, user = ${env:PGUSER:-postgres},
  database = 'shop', table = 'orders');
CREATE SINK CONNECTOR IF NOT EXISTS pg_orders_copy TO postgres FROM pg_orders WITH (
  host = ${env:PGHOST:-127.0.0.1}, port = ${env:PGPORT:-5432}, user = ${env:PGUSER:-postgres},
  database = 'shop', table = 'orders_copy');

SELECT name, kind, state, rows_total, last_error FROM connectors;
