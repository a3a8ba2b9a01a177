"""The one loader: complete batches of the landing into the warehouse, idempotent by batch."""

from dayclose.loader.contract import (
    MARKER,
    Batch,
    ManifestMismatch,
    discover,
    missing_markers,
    pending_summary,
)
from dayclose.loader.load import RECHECK_DAYS, LoadReport, ensure_landing, load_source, load_workers

__all__ = [
    "MARKER",
    "RECHECK_DAYS",
    "Batch",
    "LoadReport",
    "ManifestMismatch",
    "discover",
    "ensure_landing",
    "load_source",
    "load_workers",
    "missing_markers",
    "pending_summary",
]
