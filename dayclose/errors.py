"""The one error type for expected failures, and the exit codes the CLI turns them into.

Library code raises `DaycloseError` (or a subclass) with a one-line message that names the
file, line, day or setting at fault and what is expected; only `dayclose.cli` prints it and
exits. Anything else that escapes is a bug, shown with its traceback.
"""

from __future__ import annotations

# Exit codes, after BSD sysexits.h where one fits.
EXIT_FAILED = 1  # the run did not publish, or not all (a gate failed, a batch was refused, no source folder)
EXIT_USAGE = 64  # a bad argument or setting
EXIT_DATA = 65  # input data that cannot be used as it is
EXIT_NOT_FOUND = 66  # a file or folder that does not exist
EXIT_UNAVAILABLE = 69  # a service that does not answer (Postgres, NATS)
EXIT_BUSY = 75  # another run holds the warehouse: try again later
EXIT_CONFIG = 78  # the project or profile is not usable
EXIT_TERMINATED = 143  # stopped by SIGTERM (128 + 15, as a shell reports it)


class DaycloseError(Exception):
    """An expected failure: a message for the user and the exit code that goes with it."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class WarehouseBusy(DaycloseError):
    """Another run holds the warehouse (its run lock, or DuckDB's file lock)."""

    exit_code = EXIT_BUSY


class Unavailable(DaycloseError):
    """A server dayclose needs does not answer."""

    exit_code = EXIT_UNAVAILABLE


class Terminated(KeyboardInterrupt):
    """The process was told to stop (SIGTERM: a scheduler, a cancelled deployment run).

    A KeyboardInterrupt, so that it unwinds every step as Ctrl-C does: dbt cancels its
    queries, the loader ends its check process, a transaction rolls back, the run lock is
    released. The message says what the run had done; the CLI prints it and exits 143."""

    exit_code = EXIT_TERMINATED
