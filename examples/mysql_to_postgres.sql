-- Keep a PostgreSQL table equal to a MySQL/MariaDB table, in real time (change-data capture).
-- The source first copies the table's rows (the snapshot: a progress bar in `connectql run`),
-- then applies every insert, update and delete from the server's binary log within a second or
-- two. Ctrl-C stops it with its offsets kept; run the script again and it goes on from there.
-- Setup from nothing (servers, binary log, user, tables): README, section "MySQL / MariaDB".
-- Hosts and ports come from MYSQL_HOST, MYSQL_TCP_PORT, PGHOST, PGPORT, PGUSER (the variables
-- the mariadb and psql clients read), with the defaults written after ':-'; the cdc user's
-- password from CDC_PASSWORD; the postgres sink reads PGPASSWORD as psql does.

CREATE SOURCE CONNECTOR IF NOT EXISTS orders_cdc FROM mysql INTO orders WITH (
  host = ${env:MYSQL_HOST:-127.0.0.1}, port = ${env:MYSQL_TCP_PORT:-3306},
  user = 'cdc', password = ${env:CDC_PASSWORD}, database = 'shop', table = 'orders');
CREATE SINK CONNECTOR IF NOT EXISTS orders_pg TO postgres FROM orders WITH (
  host = ${env:PGHOST:-127.0.0.1}, port = ${env:PGPORT:-5432}, user = ${env:PGUSER:-postgres},
  database = 'analytics', table = 'orders');

SELECT name, kind, state, rows_total, last_error FROM connectors;
