"""The `dayclose` command: generate, run, restate, demo. A thin shell over dayclose.jobs.

The only place that turns an expected failure (DaycloseError) into a one-line message and
an exit code; `--debug` shows the traceback as well.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from dayclose.console import show_progress, stderr_progress
from dayclose.dates import parse_as_of, parse_date
from dayclose.errors import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    DaycloseError,
    Terminated,
)
from dayclose.settings import TARGETS, resolve_target
from dayclose.sources import sources
from dayclose.stream.cli import add_commands

# the optional packages of the operators' streaming path (pip install 'dayclose[stream]')
STREAM_PACKAGES = frozenset({"nats", "numba", "msgspec"})


def existing_folder(text: str, what: str = "--landing") -> Path:
    path = Path(text)
    if not path.is_dir():
        raise DaycloseError(f"{what} {text}: no such folder (expected the landing root)", EXIT_NOT_FOUND)
    return path


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (a scheduler stopping the run) raises Terminated in the main thread, which
    unwinds the run as Ctrl-C does; a second SIGTERM is ignored while it unwinds (a
    scheduler that cannot wait sends SIGKILL, which every step survives too)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _generate(args: argparse.Namespace) -> int:
    from dayclose.generate import generate_sales, generate_units

    start = parse_date(args.start, "--start")
    common = {"seed": args.seed}
    if args.source == "sales":
        report = generate_sales(
            Path(args.landing),
            start,
            args.days,
            shops=args.shops,
            events_per_day=args.events_per_day,
            **common,
        )
    else:
        report = generate_units(
            Path(args.landing),
            start,
            args.days,
            plants=args.plants,
            units_per_day=args.events_per_day,
            **common,
        )
    print(
        f"generated {report.events:,} {args.source} events as {report.lines:,} lines in "
        f"{report.batches} batches ({report.seconds:.1f}s); ground truth: {report.truth_path}"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    from dayclose.jobs import run_nightly

    as_of = parse_as_of(args.as_of)
    with stop_on_sigterm():
        summary = run_nightly(
            args.job,
            resolve_target(args.target),
            existing_folder(args.landing),
            as_of,
            quiet=not args.verbose,
        )
    print("\n".join(summary.lines()))
    return 0 if summary.ok else EXIT_FAILED


def _restate(args: argparse.Namespace) -> int:
    from dayclose.jobs import restate

    with stop_on_sigterm():
        summary = restate(
            args.job,
            resolve_target(args.target),
            parse_date(args.start, "--start"),
            parse_date(args.end, "--end"),
            args.reason,
            landing=existing_folder(args.landing) if args.landing else None,
            as_of=parse_as_of(args.as_of) if args.as_of else None,
            quiet=not args.verbose,
        )
    print("\n".join(summary.lines()))
    return 0 if summary.ok else EXIT_FAILED


def _report(args: argparse.Namespace) -> int:
    from dayclose.report import write_report

    page = write_report(resolve_target(args.target), Path(args.out))
    print(f"report written: {page} (open it in a browser)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from dayclose.demo import run_demo

    return run_demo(Path(args.landing) if args.landing else None, args.target)


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line and the usage exit code."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


VERBOSE = "print dbt's log lines as it runs (default: progress on stderr, dbt's log in its file)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dayclose",
        description="Daily numbers that stay right when data arrives late, twice, or broken.",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    jobs = sorted(sources())

    gen = sub.add_parser("generate", help="write synthetic landing batches")
    gen.add_argument("source", choices=jobs)
    gen.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    gen.add_argument("--days", type=positive, required=True, help="how many days, at least 1")
    gen.add_argument("--shops", type=positive, default=140)
    gen.add_argument("--plants", type=positive, default=300, help="units: breweries (2 lines each)")
    gen.add_argument(
        "--events-per-day",
        "--units-per-day",
        type=positive,
        default=None,
        help="events per day (sales default: 61 per shop; units default: 200 per line)",
    )
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--landing", required=True)
    gen.set_defaults(func=_generate)

    run = sub.add_parser("run", help="the nightly job: load, rebuild the window, run the gates, publish")
    run.add_argument("job", choices=jobs)
    run.add_argument("--as-of", default=None, help="UTC instant, e.g. 2026-11-24T00:30 (default: now)")
    run.add_argument("--landing", required=True)
    run.add_argument(
        "--target",
        choices=TARGETS,
        default=None,
        help="duckdb (default, file DAYCLOSE_DUCKDB), postgres (libpq PG* variables) or spark (in-process)",
    )
    run.add_argument("--verbose", action="store_true", help=VERBOSE)
    run.set_defaults(func=_run)

    rst = sub.add_parser("restate", help="rebuild closed days beyond the window, recorded and gated")
    rst.add_argument("job", choices=jobs)
    rst.add_argument("--start", required=True, help="first day to restate, YYYY-MM-DD")
    rst.add_argument("--end", required=True, help="last day to restate, YYYY-MM-DD (inclusive)")
    rst.add_argument("--reason", required=True, help="why: recorded with every value it changes")
    rst.add_argument("--landing", default=None, help="load complete batches not yet loaded first")
    rst.add_argument("--as-of", default=None, help="UTC instant (default: now)")
    rst.add_argument("--target", choices=TARGETS, default=None)
    rst.add_argument("--verbose", action="store_true", help=VERBOSE)
    rst.set_defaults(func=_restate)

    rep = sub.add_parser("report", help="charts of the published numbers: one HTML page and its PNGs")
    rep.add_argument("--target", choices=TARGETS, default=None)
    rep.add_argument("--out", default="dayclose-report", help="folder to write index.html and the PNGs into")
    rep.set_defaults(func=_report)

    demo = sub.add_parser("demo", help="incidents 000 and 003 replayed: the original job vs dayclose")
    demo.add_argument("--landing", default=None, help="where to write the demo's batches")
    demo.add_argument("--target", choices=TARGETS, default=None)
    demo.set_defaults(func=_demo)
    add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    show_progress(stderr_progress)
    try:
        return args.func(args)
    except DaycloseError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"dayclose {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:
        if exc.name not in STREAM_PACKAGES:
            raise
        print(
            f"dayclose {args.command}: the operators' streaming path needs the package {exc.name}: "
            "install dayclose[stream] (pip install -e '.[stream]')",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except Terminated as exc:
        print(f"dayclose {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"dayclose {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        show_progress(None)


def entry() -> NoReturn:
    """The console script (and `python -m dayclose.cli`)."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
