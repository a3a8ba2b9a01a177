"""Progress of long steps, on standard error: off unless the command line turns it on.

Library code calls `progress(...)`; only the CLI (and the demo) install a printer, so tests
and flows stay quiet and standard output stays the result.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime

_printer: Callable[[str], None] | None = None


def stderr_progress(message: str) -> None:
    print(f"  {datetime.now():%H:%M:%S} {message}", file=sys.stderr, flush=True)


def show_progress(printer: Callable[[str], None] | None = stderr_progress) -> None:
    """Print progress with `printer` from now on (None: stay quiet)."""
    global _printer
    _printer = printer


def progress(message: str) -> None:
    """Report a step of a long piece of work, when progress is shown."""
    if _printer is not None:
        _printer(message)
