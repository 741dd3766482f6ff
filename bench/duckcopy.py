"""The DuckDB yardstick of bench.bulk, run by the python of a separate venv holding duckdb
1.4.4 and the duckdb-ext-mysql / duckdb-ext-postgres packages (only the standard library and
duckdb are imported here): ATTACH the source and the target, INSERT ... SELECT.

    python duckcopy.py SPEC_JSON

SPEC_JSON: {"kind": "mysql" | "postgres", "source": ATTACH string, "target": ATTACH string,
"table": name}. Prints {"start": epoch s, "end": epoch s} (ATTACH to the INSERT's end)."""

import json
import sys
import time
from pathlib import Path

import duckdb


def extension(name: str) -> str:
    """The extension file a duckdb-ext-* package installed beside duckdb."""
    root = Path(duckdb.__file__).parent.parent / "duckdb_ext" / "extensions"
    found = sorted(root.glob(f"*/*/{name}.duckdb_extension"))
    if not found:
        raise SystemExit(f"no {name} extension under {root}")
    return str(found[-1])


def main() -> int:
    spec = json.loads(sys.argv[1])
    con = duckdb.connect()
    scanner = "mysql_scanner" if spec["kind"] == "mysql" else "postgres_scanner"
    for name in {scanner, "postgres_scanner"}:
        con.execute(f"LOAD '{extension(name)}'")
    start = time.time()
    con.execute(f"ATTACH '{spec['source']}' AS src (TYPE {spec['kind']}, READ_ONLY)")
    con.execute(f"ATTACH '{spec['target']}' AS dst (TYPE postgres)")
    con.execute(f"INSERT INTO dst.public.orders SELECT * FROM src.{spec['table']}")
    print(json.dumps({"start": start, "end": time.time()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
