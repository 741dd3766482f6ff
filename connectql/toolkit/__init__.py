"""The public connector API: placeholder while the toolkit is built."""
