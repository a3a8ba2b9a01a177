"""A throw-away Prefect stack for the deployment test: a server, a process work pool and a
worker, as subprocesses, as an operator would run them.

    with PrefectStack(project_dir, pool="dayclose", extra_env={...}) as stack:
        stack.deploy_all()                       # prefect deploy --all (prefect.yaml in project_dir)
        stack.start_worker()
        run_id = stack.run("flow-name/deployment", parameters={...})
        state = stack.wait_final(run_id, timeout=120)

Everything lives under a private PREFECT_HOME (sqlite database included); every process is
started in its own session and stopped by its process group on exit. A worker starts each flow
run in a session of its own, so a flow run can outlive its worker: `end_flow_runs()` (also on
exit) ends the flow-run processes still alive, found by the runs' `infrastructure_pid`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PREFECT = str(Path(sys.executable).with_name("prefect"))
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrefectStack:
    def __init__(
        self,
        project_dir: Path,
        pool: str = "dayclose",
        home: Path | None = None,
        worker_query_seconds: float = 2,
        worker_prefetch_seconds: float = 10,
        extra_env: dict[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.project_dir = Path(project_dir).resolve()
        self.pool = pool
        self.home = Path(home or tempfile.mkdtemp(prefix="prefect-home-"))
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir = Path(log_dir or self.home / "logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.timings: dict[str, float] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {
            **os.environ,
            "PREFECT_HOME": str(self.home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(self.port),
            "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{self.home}/prefect.db",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_UI_ENABLED": "false",
            # do not let a developer's profile leak in
            "PREFECT_PROFILES_PATH": str(self.home / "profiles.toml"),
            "PREFECT_WORKER_QUERY_SECONDS": str(worker_query_seconds),
            "PREFECT_WORKER_PREFETCH_SECONDS": str(worker_prefetch_seconds),
            # services that matter for the tests (faster loops than the defaults)
            "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": "5",
            "PREFECT_SERVER_SERVICES_CANCELLATION_CLEANUP_LOOP_SECONDS": "5",
            "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_LOOP_SECONDS": "5",
            "PREFECT_LOGGING_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        }
        self.env.pop("PREFECT_PROFILE", None)

    # ------------------------------------------------------------------ processes
    def _spawn(
        self, name: str, args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "wb") as log:  # the child keeps its own handle
            proc = subprocess.Popen(
                args,
                cwd=cwd or self.project_dir,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: we can stop it and its children by pid
            )
        self.procs[name] = proc
        return proc

    def cli(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PREFECT, "--no-prompt", *args],
            cwd=self.project_dir,
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def start_server(self, timeout: float = 180) -> None:
        t0 = time.monotonic()
        self._spawn(
            "server",
            [
                PREFECT,
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-ui",
                "--analytics-off",
            ],
        )
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.procs["server"].poll() is not None:
                raise RuntimeError(f"server exited; see {self.log_dir / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.5)
        else:
            raise TimeoutError("server did not become healthy")
        self.timings["server_start_s"] = round(time.monotonic() - t0, 1)

    def create_pool(self) -> None:
        t0 = time.monotonic()
        self.cli("work-pool", "create", self.pool, "--type", "process", "--overwrite")
        self.timings["pool_create_s"] = round(time.monotonic() - t0, 1)

    def start_worker(
        self, name: str = "worker", timeout: float = 120, env: dict[str, str] | None = None
    ) -> None:
        """A process worker (its flow runs get its environment, updated with `env`)."""
        t0 = time.monotonic()
        self._spawn(
            name,
            [
                PREFECT,
                "worker",
                "start",
                "--pool",
                self.pool,
                "--type",
                "process",
                "--name",
                f"{self.pool}-{name}",
            ],
            env=env,
        )
        # ready once the worker logs that it started (its first poll follows right away)
        log = self.log_dir / f"{name}.log"
        while time.monotonic() - t0 < timeout:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"worker exited; see {log}")
            if "started!" in log.read_text(errors="replace"):
                break
            time.sleep(0.2)
        else:
            raise TimeoutError("worker did not start")
        self.timings[f"{name}_start_s"] = round(time.monotonic() - t0, 1)

    def deploy_all(self) -> None:
        t0 = time.monotonic()
        out = self.cli("deploy", "--all", timeout=300)
        self.timings["deploy_all_s"] = round(time.monotonic() - t0, 1)
        self.deploy_output = out.stdout

    def stop_proc(self, name: str, grace: float = 5) -> None:
        """SIGTERM to a process's group, SIGKILL after `grace` seconds. A worker stops in under a
        second here when the machine is idle, but in the full test run each took the whole 30 s it
        was once given: a test's teardown needs it gone, not gone gracefully."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def kill(self, name: str) -> float:
        """`kill -9` of a process's group (a worker that dies): the monotonic time of the kill."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=30)
        return killed

    def flow_run_pid(self, run_id: str, run: dict | None = None) -> int | None:
        """The process of a flow run that a process worker started, while it is alive."""
        infrastructure_pid = (run or self.flow_run(run_id)).get("infrastructure_pid")
        if not infrastructure_pid:
            return None
        pid = int(str(infrastructure_pid).rsplit(":", 1)[-1])  # "<pid>" or "<host>:<pid>"
        try:  # this run's process, not another one that got the same pid since
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return None
        return pid if f"PREFECT__FLOW_RUN_ID={run_id}".encode() in environ else None

    def wait_flow_run_exit(self, run_id: str, timeout: float = 60) -> float:
        """Wait until the flow run's process has exited: the seconds waited."""
        t0 = time.monotonic()
        while (pid := self.flow_run_pid(run_id)) is not None:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"the process {pid} of flow run {run_id} is still alive")
            time.sleep(0.2)
        return time.monotonic() - t0

    def end_flow_runs(self) -> list[int]:
        """SIGKILL the flow-run processes still alive (each in its own session): their pids."""
        ended = []
        for run in self.api("POST", "/flow_runs/filter", {"limit": 200}) or []:
            pid = self.flow_run_pid(run["id"], run)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    if os.getpgid(pid) == pid:  # its own group: it and anything it started
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
                ended.append(pid)
        return ended

    def stop(self) -> None:
        if self.procs.get("server") and self.procs["server"].poll() is None:
            with contextlib.suppress(Exception):  # the API is needed to find them
                self.end_flow_runs()
        # workers first, server last; each by its own process group id
        for name in sorted(self.procs, key=lambda n: n == "server"):
            with contextlib.suppress(ProcessLookupError):
                self.stop_proc(name)
        self.procs.clear()

    def __enter__(self) -> PrefectStack:
        try:
            self.start_server()
            self.create_pool()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ REST helpers
    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.api_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        for attempt in range(10):
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    raw = r.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                # 503 = a retryable server error (on sqlite usually "database is locked");
                # Prefect's own client retries these, a bare HTTP client must too
                if exc.code != 503 or attempt == 9:
                    raise
                self.retried_503 = getattr(self, "retried_503", 0) + 1
                time.sleep(0.5 * (attempt + 1))

    def deployment(self, full_name: str) -> dict:
        flow_name, dep_name = full_name.split("/")
        return self.api("GET", f"/deployments/name/{flow_name}/{dep_name}")

    def run(self, full_name: str, parameters: dict | None = None, **extra: Any) -> str:
        dep = self.deployment(full_name)
        body = {"parameters": parameters or {}, **extra}
        fr = self.api("POST", f"/deployments/{dep['id']}/create_flow_run", body)
        return fr["id"]

    def flow_run(self, run_id: str) -> dict:
        return self.api("GET", f"/flow_runs/{run_id}")

    def states(self, run_id: str) -> list[dict]:
        return self.api("GET", f"/flow_run_states/?flow_run_id={run_id}")

    def runs_of(self, deployment_id: str) -> list[dict]:
        return self.api(
            "POST",
            "/flow_runs/filter",
            {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"},
        )

    def wait_state(self, run_id: str, types: set[str], timeout: float = 120, poll: float = 0.5) -> dict:
        t0 = time.monotonic()
        while True:
            fr = self.flow_run(run_id)
            if fr["state_type"] in types:
                return fr
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"run {run_id} still {fr['state_type']}/{fr['state_name']}")
            time.sleep(poll)

    def wait_final(self, run_id: str, timeout: float = 120) -> dict:
        return self.wait_state(run_id, TERMINAL, timeout)

    def logs(self, run_id: str) -> list[str]:
        rows = self.api(
            "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}, "sort": "TIMESTAMP_ASC"}
        )
        return [f"{r['timestamp'][11:23]} {r['message']}" for r in rows]

    def errors(self, run_id: str) -> list[str]:
        """The run's log messages at level ERROR and above."""
        rows = self.api(
            "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}, "level": {"ge_": 40}}}
        )
        return [r["message"] for r in rows]
