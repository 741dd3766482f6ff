-- Keep a PostgreSQL table equal to a MySQL/MariaDB table, in real time (change-data capture).
-- The source first copies the table's rows (the snapshot: a progress bar in `connectql run`),
-- then applies every insert, update and delete from the server's binary log within a second or
-- two. Ctrl-C stops it with its offsets kept; run the script again and it goes on from there.
-- Setup from nothing (servers, binary log, user, tables): README, "MySQL -> PostgreSQL".

CREATE SOURCE CONNECTOR IF NOT EXISTS orders_cdc FROM mysql INTO orders WITH (
  host = '127.0.0.1', port = 3306, user = 'cdc', password = ${env:MYSQL_PWD},
  database = 'shop', table = 'orders');

CREATE SINK CONNECTOR IF NOT EXISTS orders_pg TO postgres FROM orders WITH (
  host = '127.0.0.1', port = 5432, user = 'postgres', database = 'analytics', table = 'orders');

SELECT name, kind, state, rows_total, last_error FROM connectors;
