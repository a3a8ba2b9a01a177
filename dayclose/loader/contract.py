"""The landing contract: batch folders, their completeness marker and its manifest.

Layout: <landing>/<source>/arrived=YYYY-MM-DDTHH/part-NNNN.jsonl, completed by a
_SUCCESS manifest: {"source": ..., "batch": ..., "files": [{"name", "rows", "sha256"}]}.
A batch is one arrival hour; it is complete once its marker exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cached_property
from pathlib import Path

MARKER = "_SUCCESS"
_HOUR = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}"  # an arrival hour, YYYY-MM-DDTHH
BATCH_DIR = re.compile(rf"^arrived=({_HOUR})$")
BATCH_ID = re.compile(rf"^{_HOUR}$")


@dataclass(frozen=True)
class Batch:
    source: str
    batch_id: str  # YYYY-MM-DDTHH, the arrival hour
    path: Path

    @cached_property
    def arrived_at(self) -> datetime:
        """The arrival hour; ValueError when it is not one (a month 13, an hour 24). Parsed by
        slicing: strptime took most of a year's discovery (8,640 folders)."""
        b = self.batch_id
        if not BATCH_ID.match(b):
            raise ValueError(f"not an arrival hour: {b!r}")
        return datetime(int(b[0:4]), int(b[5:7]), int(b[8:10]), int(b[11:13]))

    @property
    def completed_at(self) -> datetime:
        """A batch holds one arrival hour, so it can be complete only when the hour is over."""
        return self.arrived_at + timedelta(hours=1)

    @property
    def marker(self) -> Path:
        return self.path / MARKER


class ManifestMismatch(ValueError):
    """A batch's files disagree with its _SUCCESS manifest."""


def discover(landing: Path, source: str, as_of: datetime) -> tuple[list[Batch], list[str]]:
    """Batches whose arrival hour had ended by `as_of`, oldest first, and folder problems."""
    root = landing / source
    batches: list[Batch] = []
    problems: list[str] = []
    if not root.is_dir():
        return batches, problems
    with os.scandir(root) as listing:  # the kind of each entry without a stat of its own
        entries = sorted((e.name, e.is_dir()) for e in listing)
    for name, is_dir in entries:
        if not is_dir:
            continue
        entry = root / name
        m = BATCH_DIR.match(name)
        if not m:
            problems.append(f"{entry}: not a batch folder (expected arrived=YYYY-MM-DDTHH)")
            continue
        try:
            batch = Batch(source, m.group(1), entry)
            if batch.completed_at <= as_of:
                batches.append(batch)
        except ValueError:
            problems.append(f"{entry}: not a valid arrival hour")
    return batches, problems


def read_manifest(batch: Batch) -> tuple[dict[str, dict], str]:
    """The manifest's files by name, and the manifest's own sha256."""
    blob = batch.marker.read_bytes()
    try:
        doc = json.loads(blob)
        files = {f["name"]: {"rows": int(f["rows"]), "sha256": str(f["sha256"])} for f in doc["files"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestMismatch(f"_SUCCESS is not a valid manifest ({exc})") from None
    if doc.get("source", batch.source) != batch.source or doc.get("batch", batch.batch_id) != batch.batch_id:
        raise ManifestMismatch(f"_SUCCESS names source {doc.get('source')!r} batch {doc.get('batch')!r}")
    return files, hashlib.sha256(blob).hexdigest()


def data_files(batch: Batch) -> list[str]:
    return sorted(p.name for p in batch.path.iterdir() if p.is_file() and p.name != MARKER)


def marker_sha(batch: Batch) -> str:
    """sha256 of the batch's manifest: the version of the batch."""
    return hashlib.sha256(batch.marker.read_bytes()).hexdigest()


def pending_summary(batches: Iterable[str]) -> str:
    items = list(batches)
    if len(items) <= 4:
        return ", ".join(items)
    return f"{items[0]} ... {items[-1]} ({len(items)} batches)"


def missing_markers(landing: Path, source: str, first_day: date, as_of: datetime) -> list[str]:
    """Arrival hours from `first_day` 00:00 up to the last hour ended by as-of without _SUCCESS."""
    hour = datetime.combine(first_day, datetime.min.time())
    missing = []
    while hour + timedelta(hours=1) <= as_of:
        batch = Batch(source, hour.strftime("%Y-%m-%dT%H"), landing / source / f"arrived={hour:%Y-%m-%dT%H}")
        if not batch.marker.exists():
            missing.append(batch.batch_id)
        hour += timedelta(hours=1)
    return missing
