"""The streaming commands: `stream setup|server|mapping`, `simulate plants`, `monitor`, `archive`.

`add_commands(sub)` registers them on the `dayclose` parser (dayclose/cli.py). Handlers return
an exit code; expected failures raise DaycloseError, which only dayclose.cli prints.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from dayclose.console import stderr_progress
from dayclose.settings import PROJECT_DIR, TARGETS
from dayclose.stream.config import settings


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not more than 0")
    return value


def _line_ids() -> list[str]:
    from dayclose.stream.detectors import Reference

    return sorted(Reference.from_seeds().plant_of_line)


def _setup(args: argparse.Namespace) -> int:
    from dayclose.stream.streams import setup

    s = settings(replicas=args.replicas)
    report = asyncio.run(setup(s, _line_ids()))
    print("\n".join(report.lines(s)))
    return 0


def _reset(args: argparse.Namespace) -> int:
    from dayclose.stream.streams import reset_monitors

    consumers, checkpoints = asyncio.run(reset_monitors(settings()))
    print(
        f"deleted {consumers} monitor consumers and {checkpoints} checkpoints; start monitors with --from new"
    )
    return 0


def _mapping(args: argparse.Namespace) -> int:
    print(settings().mapping_config(), end="")
    return 0


def _server(args: argparse.Namespace) -> int:
    from dayclose.stream.server import PrivateCluster, PrivateServer, check_cluster_size

    store = Path(args.store) if args.store else PROJECT_DIR / ".dayclose" / "nats"
    if args.cluster != 1:
        check_cluster_size(args.cluster)
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # delivered to sigwait below, not as an exception
    server = (
        PrivateServer(settings(), store=store, port=args.port)
        if args.cluster == 1
        else PrivateCluster(settings(), nodes=args.cluster, store=store, port=args.port)
    )
    try:
        server.start()
        if isinstance(server, PrivateCluster):
            print(
                f"nats-server {server.version()} ({server.binary}): a JetStream cluster "
                f"{server.name!r} of {len(server.nodes)} nodes, Ctrl-C stops it"
            )
            for node in server.nodes:
                print(
                    f"  {node.name} on {node.url} (routes on {node.cluster_port}, monitoring "
                    f"http://127.0.0.1:{node.http_port}), store {node.store}"
                )
            print(f"export NATS_URL={server.url}")
            print("then: dayclose stream setup --replicas 3", flush=True)
        else:
            print(
                f"nats-server {server.version()} ({server.binary}) on {server.url}, store {store}; "
                "Ctrl-C stops it"
            )
            print(f"export NATS_URL={server.url}", flush=True)
        signal.sigwait(stops)
    finally:
        server.stop()
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from dayclose.stream.gateway import build_scenario, simulate

    s = settings()
    scenario = build_scenario(
        plants=args.plants,
        rate=args.rate,
        duration_s=args.duration,
        seed=args.seed,
        fmt=args.format,
        backlog_hours=args.backlog_hours,
        reconnect_after_s=args.reconnect_after,
        clock_offset_s=s.clock_offset_s,
    )
    out = Path(args.out)
    plants = asyncio.run(simulate(s, scenario, out, log=stderr_progress))
    t = plants.truth
    print(
        f"published {t.readings:,} readings in {t.messages:,} messages ({t.garbage_messages} garbage, "
        f"{t.duplicates_acked} retries stored once); ground truth: {out / 'truth'}"
    )
    return 0


def _monitor(args: argparse.Namespace) -> int:
    from dayclose.stream.monitor import monitor_main, supervise

    if args.worker is None and args.workers > 1:
        forward = []
        if args.target:
            forward += ["--target", args.target]
        if args.idle_exit:
            forward += ["--idle-exit", str(args.idle_exit)]
        forward += ["--from", args.start]
        if not args.live_path:
            forward += ["--no-live-path"]
        return supervise(args.workers, forward, log=stderr_progress)
    worker, of = (0, 1) if args.worker is None else (args.worker, args.of)
    stats = Path(args.stats) if args.stats else None
    return monitor_main(
        settings(),
        worker,
        of,
        args.target,
        args.idle_exit,
        stats,
        log=stderr_progress,
        from_new=args.start == "new",
        live_path=args.live_path,
    )


def _archive(args: argparse.Namespace) -> int:
    from dayclose.stream.archive import Archiver

    landing = Path(args.landing)
    archiver = Archiver(settings(), landing)

    async def main():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await archiver.run(stop, idle_exit=args.idle_exit, log=stderr_progress)

    stats = asyncio.run(main())
    print(
        f"archived {stats.lines:,} lines from {stats.messages:,} messages into {landing / 'units'}; "
        f"sealed {len(stats.sealed)} hours; still open: {', '.join(archiver.open_hours()) or 'none'}"
    )
    return 0


def _alerts(args: argparse.Namespace) -> int:
    from dayclose.settings import resolve_target
    from dayclose.stream.alerts import AlertTable, alert_line

    table = AlertTable(resolve_target(args.target))
    rows = table.read("closed_at is null" if args.open else "true")  # oldest first
    shown = rows[-args.last :] if args.last > 0 else []
    for row in shown:
        print(alert_line(row))
    which = "open alerts" if args.open else "alerts"
    print(f"{len(shown)} of {len(rows)} {which} in {table.relation} ({table.target.describe()})")
    return 0


def add_commands(sub) -> None:
    """Register the streaming commands on the subparsers of dayclose/cli.py build_parser."""
    stream = sub.add_parser("stream", help="the durable queue: NATS JetStream streams and mapping")
    ssub = stream.add_subparsers(dest="stream_command", required=True)
    st = ssub.add_parser("setup", help="create or update the streams and check the partition mapping")
    st.add_argument("--replicas", type=int, default=None, help="stream replicas (3 on a 3-node cluster)")
    st.set_defaults(func=_setup)
    rs = ssub.add_parser(
        "reset-monitors", help="delete the monitors' consumers and checkpoints (to change K)"
    )
    rs.set_defaults(func=_reset)
    mp = ssub.add_parser("mapping", help="print the server configuration that partitions by line")
    mp.set_defaults(func=_mapping)
    sv = ssub.add_parser("server", help="run a private nats-server with the mapping, in the foreground")
    sv.add_argument("--port", type=int, default=None, help="default: a free port")
    sv.add_argument("--store", default=None, help="JetStream store folder (default .dayclose/nats)")
    sv.add_argument(
        "--cluster",
        type=int,
        default=1,
        metavar="N",
        help="N nodes forming one JetStream cluster on loopback ports (3 or more; 1: a single server); "
        "with --port, the nodes listen on PORT..PORT+N-1, each storing in STORE/n<i>",
    )
    sv.set_defaults(func=_server)

    sim = sub.add_parser("simulate", help="simulated sources")
    simsub = sim.add_subparsers(dest="simulate_command", required=True)
    pl = simsub.add_parser("plants", help="plant gateways publishing unit readings, with injected faults")
    pl.add_argument("--plants", type=int, required=True, help="plants (2 lines each), at least 2")
    pl.add_argument("--rate", type=_positive_float, required=True, help="readings a second, all lines")
    pl.add_argument("--duration", type=_positive_float, required=True, help="seconds of live traffic")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--format", choices=("binary", "jsonl"), default="binary")
    pl.add_argument("--backlog-hours", type=float, default=4.0, help="how long the last plant was offline")
    pl.add_argument(
        "--reconnect-after", type=float, default=None, help="seconds (default 30%% of --duration)"
    )
    pl.add_argument(
        "--out", default=str(PROJECT_DIR / ".dayclose" / "simulate"), help="ground truth goes here"
    )
    pl.set_defaults(func=_simulate)

    mon = sub.add_parser("monitor", help="line monitors: drift, stuck and spike alerts in seconds")
    mon.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    mon.add_argument("--worker", type=int, default=None, help="run only worker I (of --of)")
    mon.add_argument("--of", type=int, default=1, help="the number of workers, with --worker")
    mon.add_argument("--target", choices=TARGETS, default=None, help="where line_alerts is written")
    mon.add_argument("--idle-exit", type=_positive_float, default=None, help="stop after S idle seconds")
    mon.add_argument("--stats", default=None, help="write the worker's figures (JSON) here at exit")
    mon.add_argument(
        "--from",
        dest="start",
        choices=("all", "new"),
        default="all",
        help="where a partition without a checkpoint starts: the stream's first message, or its next one",
    )
    mon.add_argument(
        "--no-live-path",
        dest="live_path",
        action="store_false",
        help="score only what JetStream delivers (the design before the live path: benchmarks)",
    )
    mon.set_defaults(func=_monitor)

    al = sub.add_parser("alerts", help="the monitors' recent alerts (line_alerts), newest last")
    al.add_argument("--last", type=int, default=20, help="how many (default 20)")
    al.add_argument("--open", action="store_true", help="only the alerts still open")
    al.add_argument("--target", choices=TARGETS, default=None, help="where line_alerts is written")
    al.set_defaults(func=_alerts)

    arc = sub.add_parser("archive", help="land the telemetry stream for the nightly units job")
    arc.add_argument("--landing", required=True, help="the landing root (units/ is written)")
    arc.add_argument(
        "--idle-exit", type=_positive_float, default=None, help="stop once idle this long and all sealed"
    )
    arc.set_defaults(func=_archive)
