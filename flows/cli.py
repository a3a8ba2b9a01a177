"""The `dayclose` command: generate, run, demo. A thin shell over flows.jobs."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from flows.generate import generate_sales, generate_units, parse_date, stderr_progress
from flows.settings import TARGETS, resolve_target


def parse_as_of(text: str | None) -> datetime:
    """An as-of instant in UTC (naive), from ISO text or now."""
    if not text:
        return datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _generate(args: argparse.Namespace) -> int:
    common = {"seed": args.seed, "progress": stderr_progress}
    if args.source == "sales":
        report = generate_sales(
            Path(args.landing),
            parse_date(args.start),
            args.days,
            shops=args.shops,
            events_per_day=args.events_per_day,
            **common,
        )
    else:
        report = generate_units(
            Path(args.landing),
            parse_date(args.start),
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
    from flows.jobs import run_nightly

    summary = run_nightly(args.job, resolve_target(args.target), Path(args.landing), parse_as_of(args.as_of))
    print("\n".join(summary.lines()))
    return 0 if summary.ok else 1


def _restate(args: argparse.Namespace) -> int:
    from flows.jobs import restate

    summary = restate(
        args.job,
        resolve_target(args.target),
        parse_date(args.start),
        parse_date(args.end),
        args.reason,
        landing=Path(args.landing) if args.landing else None,
        as_of=parse_as_of(args.as_of) if args.as_of else None,
    )
    print("\n".join(summary.lines()))
    return 0 if summary.ok else 1


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import run_demo

    return run_demo(Path(args.landing) if args.landing else None, args.target)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dayclose",
        description="Daily numbers that stay right when data arrives late, twice, or broken.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write synthetic landing batches")
    gen.add_argument("source", choices=["sales", "units"])
    gen.add_argument("--start", required=True, help="first day, YYYY-MM-DD")
    gen.add_argument("--days", type=int, required=True)
    gen.add_argument("--shops", type=int, default=140)
    gen.add_argument("--plants", type=int, default=300, help="units: breweries (2 lines each)")
    gen.add_argument(
        "--events-per-day",
        "--units-per-day",
        type=int,
        default=None,
        help="events per day (sales default: 61 per shop; units default: 200 per line)",
    )
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--landing", required=True)
    gen.set_defaults(func=_generate)

    run = sub.add_parser("run", help="the nightly job: load, rebuild the window, run the gates")
    run.add_argument("job", choices=["sales", "units"])
    run.add_argument("--as-of", default=None, help="UTC instant, e.g. 2026-11-24T00:30 (default: now)")
    run.add_argument("--landing", required=True)
    run.add_argument(
        "--target",
        choices=TARGETS,
        default=None,
        help="duckdb (default, file DAYCLOSE_DUCKDB) or postgres (libpq PG* variables)",
    )
    run.set_defaults(func=_run)

    rst = sub.add_parser("restate", help="rebuild closed days beyond the window, recorded and gated")
    rst.add_argument("job", choices=["sales", "units"])
    rst.add_argument("--start", required=True, help="first day to restate, YYYY-MM-DD")
    rst.add_argument("--end", required=True, help="last day to restate, YYYY-MM-DD (inclusive)")
    rst.add_argument("--reason", required=True, help="why: recorded with every value it changes")
    rst.add_argument("--landing", default=None, help="load complete batches not yet loaded first")
    rst.add_argument("--as-of", default=None, help="UTC instant (default: now)")
    rst.add_argument("--target", choices=TARGETS, default=None)
    rst.set_defaults(func=_restate)

    demo = sub.add_parser("demo", help="incident 000 replayed: the original job vs dayclose")
    demo.add_argument("--landing", default=None, help="where to write the demo's batches")
    demo.add_argument("--target", choices=TARGETS, default=None)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    from flows.warehouse import WarehouseBusy

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WarehouseBusy as exc:
        print(f"dayclose: {exc}", file=sys.stderr)
        return 75  # EX_TEMPFAIL: try again later


if __name__ == "__main__":
    sys.exit(main())
