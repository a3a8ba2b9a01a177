"""Arrival-hour batch folders as the landing contract has them, written as a producer would.

Lines are appended to `<landing>/<source>/arrived=YYYY-MM-DDTHH/part-NNNN.jsonl`; an hour is
sealed with its `_SUCCESS` manifest (files, line counts, sha256) written last, atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dayclose.errors import EXIT_USAGE, DaycloseError
from dayclose.loader.contract import MARKER

DAY = 86_400
HOUR = 3_600
PART_ROWS = 250_000  # lines per part file


def iso(ts: int) -> str:
    """RFC 3339 UTC text of a whole second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def iso_ms(t: float) -> str:
    """RFC 3339 UTC text with milliseconds."""
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((t - whole) * 1000):03d}Z"


@dataclass
class _Part:
    name: str
    rows: int = 0
    sha: hashlib._Hash = field(default_factory=hashlib.sha256)


@dataclass
class _HourFolder:
    path: Path
    parts: list[_Part] = field(default_factory=list)
    handle: object | None = None


class BatchWriter:
    """Appends lines to arrival-hour folders; seals an hour with its _SUCCESS manifest."""

    def __init__(self, landing: Path, source: str, part_rows: int = PART_ROWS):
        self.root = landing / source
        self.source = source
        self.part_rows = part_rows
        self.open: dict[int, _HourFolder] = {}
        self.sealed = 0
        self.lines = 0

    def write(self, arrival_ts: int, line: str) -> None:
        hour = arrival_ts - arrival_ts % HOUR
        folder = self.open.get(hour)
        if folder is None:
            path = self.root / f"arrived={time.strftime('%Y-%m-%dT%H', time.gmtime(hour))}"
            if path.exists():
                raise DaycloseError(f"{path} already exists: generate into a new --landing", EXIT_USAGE)
            path.mkdir(parents=True)
            folder = self.open[hour] = _HourFolder(path)
        if not folder.parts or folder.parts[-1].rows >= self.part_rows:
            if folder.handle is not None:
                folder.handle.close()
            part = _Part(f"part-{len(folder.parts):04d}.jsonl")
            folder.parts.append(part)
            folder.handle = open(folder.path / part.name, "wb")  # noqa: SIM115
        part = folder.parts[-1]
        data = line.encode()
        folder.handle.write(data)
        part.sha.update(data)
        part.rows += 1
        self.lines += 1

    def fill_gaps(self, start_ts: int, end_ts: int) -> None:
        """Seal an empty batch for every hour in [start_ts, end_ts) that has none.

        The landing contract has one folder per arrival hour, quiet hours included, so a
        consumer can tell "nothing arrived" from "not delivered yet".
        """
        for hour in range(start_ts - start_ts % HOUR, end_ts, HOUR):
            path = self.root / f"arrived={time.strftime('%Y-%m-%dT%H', time.gmtime(hour))}"
            if not path.exists():
                path.mkdir(parents=True)
                self.open[hour] = _HourFolder(path)
        self.seal_before(None)

    def seal_before(self, ts: int | None = None) -> None:
        """Close every hour that ends at or before `ts` (all, when None) and write its marker."""
        for hour in sorted(self.open):
            if ts is not None and hour + HOUR > ts:
                continue
            folder = self.open.pop(hour)
            if folder.handle is not None:
                folder.handle.close()
            manifest = {
                "source": self.source,
                "batch": folder.path.name.split("=", 1)[1],
                "files": [
                    {"name": p.name, "rows": p.rows, "sha256": p.sha.hexdigest()} for p in folder.parts
                ],
            }
            tmp = folder.path / (MARKER + ".tmp")
            tmp.write_text(json.dumps(manifest, indent=1) + "\n")
            os.replace(tmp, folder.path / MARKER)
            self.sealed += 1


@dataclass
class GenerateReport:
    events: int
    lines: int
    batches: int
    seconds: float
    truth_path: Path


def write_csv(path: Path, header: str, rows: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(header + "\n")
        for row in rows:
            fh.write(row + "\n")
    return path
