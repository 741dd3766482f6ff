"""One module per external system: a Spark data source (or built-in format) plus its option spec."""
