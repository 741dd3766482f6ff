"""Pure functions from a catalog entry to a Plan: no Spark calls, printable by EXPLAIN."""
