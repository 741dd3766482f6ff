"""The docs site (docs/, MkDocs with the Material theme) builds in strict mode, so that a broken
link, a missing page or a missing anchor fails the run, and the README stays a front door whose
links all lead somewhere. (The generated parts are checked in test_cli.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = [sys.executable, "-m", "mkdocs"]


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_the_site_builds_in_strict_mode_with_every_page(tmp_path):
    r = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    for page in ("connectors/postgres", "reference/cli", "reference/api", "writing-a-connector"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    api = (tmp_path / "site/reference/api/index.html").read_text()
    assert "/connectors/{name}/status" in api


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs", symlinks=False)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs/status.md").open("a") as f:
        f.write("\nSee [the statements](sql.md#no-such-section).\n")
    r = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert r.returncode != 0
    assert "no-such-section" in r.stderr


def test_the_readme_is_a_front_door_whose_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert "docs/connectors/mysql.md" in links and "docs/writing-a-connector.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_the_grammar_reference_shows_every_rule_and_keyword_of_the_parser():
    """docs/reference/grammar.md is made from the parser's grammar: each rule the parser has
    (its name at the start of a line) and each keyword it lexes is on the page."""
    from connectql import docsite
    from connectql.grammar import parser

    page = docsite.grammar_page()
    lark = parser._parser()
    rules = {r.origin.name for r in lark.rules if not str(r.origin.name).startswith("__")}
    missing = [r for r in rules if not re.search(rf"^!?{re.escape(str(r))}:", page, re.M)]
    assert len(rules) > 20 and not missing, (len(rules), missing)
    keywords = [t.name for t in lark.terminals if t.priority == 2 and t.name.isalpha()]
    assert keywords and all(f"`{k}`" in page for k in keywords), keywords
