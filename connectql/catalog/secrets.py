"""Secret values of CREATE SECRET, kept in a file only the owner can read, never in the tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

from connectql.errors import CatalogError


class SecretStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _load(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _save(self, data: dict[str, str]) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def names(self) -> list[str]:
        return sorted(self._load())

    def has(self, name: str) -> bool:
        return name in self._load()

    def get(self, name: str) -> str:
        data = self._load()
        if name not in data:
            raise CatalogError(
                f"no secret named '{name}' (create it with CREATE SECRET {name} AS '...')"
            )
        return data[name]

    def put(self, name: str, value: str) -> None:
        self._save({**self._load(), name: value})

    def remove(self, name: str) -> None:
        data = self._load()
        data.pop(name, None)
        self._save(data)

    def values(self) -> list[str]:
        return list(self._load().values())
