"""The one loader: complete batches of the landing into the warehouse's raw tables, idempotent by batch."""

from dayclose.loader.contract import (
    MARKER,
    Batch,
    ManifestMismatch,
    discover,
    missing_markers,
    pending_summary,
)
from dayclose.loader.ingest import ensure_landing
from dayclose.loader.load import RECHECK_DAYS, BatchResult, LoadReport, load_source

__all__ = [
    "MARKER",
    "RECHECK_DAYS",
    "Batch",
    "BatchResult",
    "LoadReport",
    "ManifestMismatch",
    "discover",
    "ensure_landing",
    "load_source",
    "missing_markers",
    "pending_summary",
]
