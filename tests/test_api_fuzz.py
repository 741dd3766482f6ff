"""Schemathesis against a live `connectql server`: each operation of the /openapi.json it serves
gets generated requests (its examples, the coverage phase's boundary and invalid cases, the
fuzzing phase's random valid and invalid ones) and none may get a 5xx; responses must have a
documented status, content type and schema, undeclared methods a 405 with Allow, invalid
requests a 4xx and valid ones no 400 (except where validity is beyond the schema: SQL text, a
connector's config).

The server is a real process on a temporary home holding one connector, EXISTING: a paused
datagen source that makes only a few rows when resumed, so fuzzing costs little CPU. Half the
generated connector names are replaced with it, so actions and reads hit a real connector; it
is created again after a generated DELETE drops it. Cases whose body names a connector type
are left out (the description's examples among them), so fuzzing cannot create a connector: one
could write to an arbitrary path (a file sink), connect to an arbitrary host or keep a query
running; the last test checks that none was created. The server runs in the temporary
directory, so a relative path would land there anyway.

The operations are run by schemathesis's engine (what `st run` runs), one pytest test each,
seeded and deterministic; /openapi.json itself is what the schema is loaded from.
schemathesis.pytest.from_fixture cannot be used: its lazy loader sets Node._nodeid, which
pytest 9.2 no longer has.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis import engine
from schemathesis.engine import events

from connectql.api.routes import ROUTES
from connectql.connectors import registry
from tests.crash import server_process

pytestmark = pytest.mark.spark

EXISTING = "g"
CREATE_EXISTING = (
    f"CREATE SOURCE CONNECTOR {EXISTING} FROM datagen INTO s WITH ("
    "\"initial.state\" = 'paused', run = 'once', 'rows.total' = 10)"
)
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "unsupported_method",
    "allow_header_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
]
# bodies whose validity is beyond the schema: any text (only the parser knows SQL), a config
# (only the connector type's option spec knows its keys)
FREE_TEXT = ("create_connector", "sql", "put_config", "patch_config")
OPERATIONS = [(m, p, handler) for m, p, handler in ROUTES if handler != "openapi"]


def config(handler: str) -> schemathesis.Config:
    checks = [c for c in CHECKS if c != "positive_data_acceptance" or handler not in FREE_TEXT]
    return schemathesis.Config.from_dict(
        {
            "seed": 20260601,
            "generation": {
                "mode": "all",
                "max-examples": 50,
                "deterministic": True,
                "database": "none",
            },
            "phases": {"stateful": {"enabled": False}},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in checks}},
            "request-timeout": 60,
        }
    )


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")  # its working directory: relative paths land here
    with server_process(root / "home", root, cwd=root) as (_, url):
        create_existing(url)
        yield url


def load_schema(url: str, method: str, path: str, handler: str):
    """The served description, narrowed to one operation, with this module's hooks."""
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config(handler))

    def after_call(context, case, response):
        dropped = case.method == "DELETE" and case.formatted_path == f"/connectors/{EXISTING}"
        if dropped and response.status_code == 200:
            create_existing(url)

    for hook in (flatmap_path_parameters, filter_case, before_add_examples, after_call):
        schema.hook(hook)
    return schema.include(method=method, path=path)


def flatmap_path_parameters(context, path_parameters):
    """Half the connector names generated become the existing connector's."""
    if not path_parameters or "name" not in path_parameters:
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, {**path_parameters, "name": EXISTING}])


def filter_case(context, case) -> bool:
    """The coverage and fuzzing phases' cases, without those that could create a connector."""
    return creates_nothing(case)


def before_add_examples(context, examples) -> None:
    """The description's examples (one creates a datagen source), without those."""
    examples[:] = [case for case in examples if creates_nothing(case)]


def creates_nothing(case) -> bool:
    """Whether the case's body names no connector type, so it cannot create a connector."""
    text = json.dumps(case.body, default=str).lower()
    return not any(type_ in text for type_ in registry.plugins())


def create_existing(url: str) -> None:
    req = urllib.request.Request(
        url + "/connectors", CREATE_EXISTING.encode(), {"Content-Type": "text/plain"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 201


def run_engine(schema) -> tuple[int, list[str]]:
    """Run every phase on `schema`: (requests sent, one report per failed check)."""
    sent, failures = 0, []
    for event in engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            sent += len(event.recorder.interactions)
            failures += reports(event.recorder)
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            failures.append(f"engine error: {getattr(event, 'value', None) or event.exception}")
    return sent, failures


def reports(recorder) -> list[str]:
    out = []
    for case_id, checks in recorder.checks.items():
        for check in checks:
            if check.failure_info is None:
                continue
            failure, interaction = check.failure_info.failure, recorder.interactions.get(case_id)
            response = interaction.response if interaction else None
            answer = response.content[:300] if response else b"(no response)"
            out.append(
                f"{recorder.label}: {check.name}: {failure.title}\n{failure.message}\n"
                f"{check.failure_info.code_sample}\nanswered {answer!r}"
            )
    return out


@pytest.mark.parametrize(("method", "path", "handler"), OPERATIONS, ids=[h for *_, h in OPERATIONS])
def test_generated_requests(server_url, method, path, handler):
    sent, failures = run_engine(load_schema(server_url, method, path, handler))
    assert not failures, f"{len(failures)} failed checks:\n\n" + "\n\n".join(failures)
    assert sent > 0


def test_fuzzing_created_no_connector(server_url):
    with urllib.request.urlopen(server_url + "/connectors", timeout=60) as resp:
        assert json.load(resp) == [EXISTING]
