"""The HTTP API's endpoints over one Worker: Kafka Connect's /connectors and /connector-plugins,
plus /sql, /streams, /health and /metrics. Each takes a Request and returns (status, body)."""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from connectql.api import kafkaconnect, metrics, models
from connectql.catalog import states
from connectql.catalog.redact import statement_text
from connectql.errors import CatalogError, ConnectQLError, PlanError, StateError
from connectql.grammar import ast
from connectql.worker.interface import WorkerApi


class ApiError(Exception):
    """An error answer: its status, its message and `extra` fields in the JSON body, and
    `headers` to send with it."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(message)
        self.status, self.headers, self.extra = status, headers or {}, extra


@dataclass
class Request:
    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)  # from the path template
    query: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = ""

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError as e:
            raise ApiError(400, f"the body is not valid JSON: {e}") from None

    def text(self) -> str:
        try:
            return self.body.decode()
        except UnicodeDecodeError:
            raise ApiError(400, "the body is not UTF-8 text") from None


EXPAND = ["status", "info"]
READS = (
    ast.Select,
    ast.Show,
    ast.Describe,
)  # statements that change nothing  # what GET /connectors?expand= adds per connector
STATUS_SQL = (
    "SELECT name, state, desired_state, rows_total, rows_written, rows_filtered,"
    " rows_dead_lettered, rows_per_sec, lag, lag_bytes, last_batch_at, last_error FROM connectors"
)


class Routes:
    """The endpoints; `worker` is used only through WorkerApi (the statements it runs, its
    catalog to read, its home)."""

    def __init__(self, worker: WorkerApi, worker_id: str):
        self.worker, self.worker_id = worker, worker_id
        self.registry = metrics.registry(worker.catalog)  # the API adds its latencies to it
        # The worker runs one statement at a time; reads of the catalog need no turn.
        self.statements = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def run(self, stmt: ast.Statement):
        with self.statements:
            return self.worker.execute(stmt)

    def entry(self, name: str):
        try:
            return self.worker.catalog.get_connector(name)
        except CatalogError:
            raise ApiError(404, f"connector '{name}' not found") from None

    def status_rows(self, name: str | None = None) -> dict[str, dict[str, Any]]:
        where, params = (" WHERE name = ?", [name]) if name else ("", [])
        cols, rows = self.worker.catalog.read(STATUS_SQL + where, params, figures=True)
        return {r[0]: dict(zip(cols, r, strict=True)) for r in rows}

    def status_of(self, entry) -> dict[str, Any]:
        row = self.status_rows(entry.name).get(entry.name)
        if row is None:
            raise ApiError(404, f"connector '{entry.name}' not found")
        return kafkaconnect.status(entry, row, self.worker_id)

    # ------------------------------------------------------------------ /connectors
    def list_connectors(self, req: Request):
        entries = self.worker.catalog.connectors()
        if "expand" not in req.query:
            return 200, sorted(e.name for e in entries)
        expand = set(req.query["expand"].split(","))
        unknown = expand - set(EXPAND)
        if unknown:
            raise ApiError(400, f"expand takes status and/or info, not {sorted(unknown)[0]!r}")
        rows = self.status_rows()
        out = {}
        for e in entries:
            out[e.name] = {}
            if "info" in expand:
                out[e.name]["info"] = kafkaconnect.info(e)
            if "status" in expand and e.name in rows:
                out[e.name]["status"] = kafkaconnect.status(e, rows[e.name], self.worker_id)
        return 200, out

    def create_connector(self, req: Request):
        stmt = self._create_statement(req)
        if self.worker.catalog.has_connector(stmt.name):
            if stmt.if_not_exists:  # CREATE ... IF NOT EXISTS: left as it is
                return 200, kafkaconnect.info(self.worker.catalog.get_connector(stmt.name))
            raise ApiError(409, f"connector '{stmt.name}' already exists")
        self.run(stmt)
        return 201, kafkaconnect.info(self.worker.catalog.get_connector(stmt.name))

    def _create_statement(self, req: Request):
        text = req.text().strip()
        if text.startswith("{"):
            return kafkaconnect.statement(req.json())
        if text.startswith('"'):  # a JSON string holding the statement
            quoted = req.json()
            text = quoted if isinstance(quoted, str) else text
        from connectql.grammar.parser import parse_script

        stmts = parse_script(text)
        if len(stmts) != 1 or not isinstance(
            stmts[0], (ast.CreateSourceConnector, ast.CreateSinkConnector)
        ):
            raise ApiError(
                400,
                "the body must be one CREATE SOURCE/SINK CONNECTOR statement"
                ' or {"name": ..., "config": {...}}; send other statements to POST /sql',
            )
        return stmts[0]

    def get_connector(self, req: Request):
        return 200, kafkaconnect.info(self.entry(req.params["name"]))

    def get_config(self, req: Request):
        in_use = req.query.get("resolved") == "true"
        return 200, kafkaconnect.config(self.entry(req.params["name"]), in_use)

    def get_status(self, req: Request):
        return 200, self.status_of(self.entry(req.params["name"]))

    def _action(self, req: Request, action: str, status: int = 202):
        entry = self.entry(req.params["name"])
        result = self.run(ast.ConnectorAction(action, entry.name))
        return status, {"message": result.message, **self.status_of(entry)}

    def pause(self, req: Request):
        return self._action(req, "pause")

    def resume(self, req: Request):
        return self._action(req, "resume")

    def restart(self, req: Request):
        """?onlyFailed=true restarts only a failed connector; includeTasks changes nothing (its
        tasks are its one query's partitions, restarted with it)."""
        entry = self.entry(req.params["name"])
        if kafkaconnect.restart_flags(req.query)["onlyFailed"] and entry.state != states.FAILED:
            message = f"connector '{entry.name}' has not failed: not restarted"
            return 202, {"message": message, **self.status_of(entry)}
        return self._action(req, "restart")

    def snapshot_tables(self, req: Request):
        entry, body = self.entry(req.params["name"]), req.json()
        tables = body.get("tables") if isinstance(body, dict) else None
        if (
            not tables
            or not isinstance(tables, list)
            or not all(isinstance(t, str) for t in tables)
        ):
            raise ApiError(400, 'give the tables to read again: {"tables": ["orders", ...]}')
        try:
            result = self.run(ast.SnapshotTables(entry.name, tables))
        except PlanError as e:  # well formed, but not what this connector (or its tables) takes
            raise ApiError(409, str(e)) from None
        return 202, {"message": result.message, **self.status_of(entry)}

    def delete_connector(self, req: Request):
        entry = self.entry(req.params["name"])
        result = self.run(ast.Drop("connector", entry.name))
        return 200, {"message": result.message}

    def get_offsets(self, req: Request):
        entry = self.entry(req.params["name"])
        _, rows = self.worker.catalog.read(
            "SELECT committed_offset, latest_offset FROM connector_offsets WHERE connector = ?",
            [entry.name],
            figures=True,
        )
        committed, latest = rows[0] if rows else (None, None)
        return 200, kafkaconnect.offsets(entry.name, committed, latest)

    def reset_offsets(self, req: Request):
        entry = self.entry(req.params["name"])
        result = self.run(ast.ConnectorAction("reset_offsets", entry.name))
        return 200, {"message": result.message}

    # ------------------------------------------------------------------ the rest of Kafka Connect
    def root(self, req: Request):
        return 200, kafkaconnect.version()

    def put_config(self, req: Request):
        """Create-or-update, as deployment tools apply a config: created (201) when missing;
        else the options that differ are set with ALTER CONNECTOR (none differ: nothing runs)."""
        name, body = req.params["name"], req.json()
        if not self.worker.catalog.has_connector(name):
            stmt = kafkaconnect.statement({"name": name, "config": body})
            self.run(stmt)
            return 201, kafkaconnect.info(self.worker.catalog.get_connector(name))
        return self._alter(self.entry(name), kafkaconnect.changes(self.entry(name), body))

    def patch_config(self, req: Request):
        entry = self.entry(req.params["name"])
        return self._alter(entry, kafkaconnect.changes(entry, req.json(), partial=True))

    def _alter(self, entry, changes: dict):
        if changes:
            self.run(ast.AlterConnector(entry.name, changes))
        return 200, kafkaconnect.info(self.worker.catalog.get_connector(entry.name))

    def get_tasks(self, req: Request):
        return 200, kafkaconnect.tasks(self.entry(req.params["name"]))

    def get_task_status(self, req: Request):
        entry = self.entry(req.params["name"])
        return 200, self.status_of(entry)["tasks"][self.task(entry, req.params["task"])]

    def restart_task(self, req: Request):
        entry = self.entry(req.params["name"])
        self.task(entry, req.params["task"])
        return self._action(req, "restart")

    def task(self, entry, given: str) -> int:
        if not given.isdigit() or int(given) >= (entry.tasks or 1):
            raise ApiError(404, f"connector '{entry.name}' has no task {given}")
        return int(given)

    def stop(self, req: Request):
        """Kafka Connect's stop as PAUSE (offsets kept); a paused connector is left as it is."""
        entry = self.entry(req.params["name"])
        if entry.state == states.PAUSED:
            return 202, {"message": f"connector '{entry.name}' is paused", **self.status_of(entry)}
        return self._action(req, "pause")

    def get_topics(self, req: Request):
        entry = self.entry(req.params["name"])
        return 200, {entry.name: {"topics": [entry.stream] if entry.stream else []}}

    def reset_topics(self, req: Request):
        entry = self.entry(req.params["name"])
        return 200, {
            "message": f"connector '{entry.name}' reads and writes the streams its statement"
            " names; there is no set of active topics to reset"
        }

    def patch_offsets(self, req: Request):
        """Kafka Connect's offsets alteration: connectql can only forget them (every offset
        given as null), as DELETE .../offsets does."""
        entry = self.entry(req.params["name"])
        kafkaconnect.offsets_reset(req.json())
        result = self.run(ast.ConnectorAction("reset_offsets", entry.name))
        return 200, {"message": result.message}

    def plugin_config(self, req: Request):
        return 200, kafkaconnect.plugin_config(req.params["type"])

    # ------------------------------------------------------------------ plugins
    def list_plugins(self, req: Request):
        return 200, kafkaconnect.plugins()

    def validate_config(self, req: Request):
        return 200, kafkaconnect.validate(req.params["type"], req.json())

    # ------------------------------------------------------------------ the rest
    @staticmethod
    def _script(body) -> tuple[str, str]:
        """(sql, source) of a JSON body, read as models.SqlScript."""
        script = models.parsed(models.SqlScript, body)
        if script is not None:
            return script.sql, script.source
        if isinstance(body, dict) and isinstance(body.get("sql"), str):
            raise ApiError(400, "source must be a string: the script's file name, for messages")
        raise ApiError(400, 'the body must be SQL text or {"sql": "..."}')

    def sql(self, req: Request):
        """A script: each statement's result; the first failure stops it (400, with the results
        of the statements before it)."""
        if not req.body:
            raise ApiError(400, 'the body is empty: send SQL text or {"sql": "..."}')
        body = req.json() if req.content_type.startswith("application/json") else req.text()
        text, source = (body, "") if isinstance(body, str) else self._script(body)
        from connectql.grammar.parser import parse_script

        done = []
        try:
            stmts = parse_script(text, source)
            # reads need no turn: a SELECT does not wait behind a PAUSE that stops a query
            reads = all(isinstance(s, READS) for s in stmts)
            with contextlib.nullcontext() if reads else self.statements:
                for stmt, result in self.worker.run_statements(stmts, source):
                    done.append(
                        {"statement": statement_text(stmt), "line": stmt.line, **result.to_json()}
                    )
        except ConnectQLError as e:
            raise ApiError(error_status(e), str(e), results=done) from None
        return 200, {"results": done}

    def streams(self, req: Request):
        return 200, [self._stream(s) for s in self.worker.catalog.streams()]

    def _stream(self, s) -> dict:
        """A stream as the `streams` table shows it, its size and readers measured now."""
        stats = self.worker.measure_stream(s)
        for k in ("oldest_record", "newest_record"):
            stats[k] = stats[k] and stats[k].isoformat()
        return {
            "name": s.name,
            "schema": s.schema,
            "key": s.key,
            "path": s.path,
            "retention": s.retention,
            "options": {k: v for k, v in s.retention_options.items() if v},
            "created_by": s.created_by,
            **stats,
        }

    def health(self, req: Request):
        rows = self.status_rows()
        counts: dict[str, int] = {}
        for r in rows.values():
            counts[r["state"]] = counts.get(r["state"], 0) + 1
        failing = sorted(n for n, r in rows.items() if r["state"] == states.FAILED)
        lease = getattr(self.worker, "lease", None)  # None: connectql run (or a stand-in)
        return 200, {
            "status": "ok",
            "role": "active",
            "epoch": lease.epoch if lease else None,
            "worker_id": self.worker_id,
            "home": str(self.worker.home),
            "connectors": counts,
            "failed": failing,
        }

    def metrics(self, req: Request):
        return 200, metrics.exposition(self.worker.catalog, self.registry)


def error_status(e: ConnectQLError) -> int:
    """409 for a conflict with the current state (a lifecycle action, a name taken), else 400:
    the request asked for something wrong, and the message names what."""
    conflict = isinstance(e, StateError) or (
        isinstance(e, CatalogError) and "already exists" in str(e)
    )
    return 409 if conflict else 400


ROUTES: list[tuple[str, str, str]] = [
    ("GET", "/", "root"),
    ("GET", "/connectors", "list_connectors"),
    ("POST", "/connectors", "create_connector"),
    ("GET", "/connectors/{name}", "get_connector"),
    ("DELETE", "/connectors/{name}", "delete_connector"),
    ("GET", "/connectors/{name}/config", "get_config"),
    ("PUT", "/connectors/{name}/config", "put_config"),
    ("PATCH", "/connectors/{name}/config", "patch_config"),
    ("GET", "/connectors/{name}/tasks", "get_tasks"),
    ("GET", "/connectors/{name}/tasks/{task}/status", "get_task_status"),
    ("POST", "/connectors/{name}/tasks/{task}/restart", "restart_task"),
    ("PUT", "/connectors/{name}/stop", "stop"),
    ("GET", "/connectors/{name}/topics", "get_topics"),
    ("PUT", "/connectors/{name}/topics/reset", "reset_topics"),
    ("PATCH", "/connectors/{name}/offsets", "patch_offsets"),
    ("GET", "/connectors/{name}/status", "get_status"),
    ("PUT", "/connectors/{name}/pause", "pause"),
    ("PUT", "/connectors/{name}/resume", "resume"),
    ("POST", "/connectors/{name}/restart", "restart"),
    ("POST", "/connectors/{name}/snapshot", "snapshot_tables"),
    ("GET", "/connectors/{name}/offsets", "get_offsets"),
    ("DELETE", "/connectors/{name}/offsets", "reset_offsets"),
    ("GET", "/connector-plugins", "list_plugins"),
    ("GET", "/connector-plugins/{type}/config", "plugin_config"),
    ("PUT", "/connector-plugins/{type}/config/validate", "validate_config"),
    ("POST", "/sql", "sql"),
    ("GET", "/streams", "streams"),
    ("GET", "/health", "health"),
    ("GET", "/metrics", "metrics"),
    ("GET", "/openapi.json", "openapi"),  # generated and served by FastAPI
]
