"""A batch's files checked against its manifest before anything of it is written: pure file work.

`check_batch` reads every file of a batch once (dayclose.loader.prepass): its line count and
sha256 against _SUCCESS, and whether the engine's reader can take it byte for byte (else a
sanitized copy in the spool, and the lines to put back).

The loader checks the batches ahead of its writers. Many batches are checked by a child process
(`checked_in_a_process`), not a thread: a check is a few C calls per file (read, sha256, the
byte counts), each of which gives up Python's lock and then waits to take it back, and in a run
the lock is mostly held by dbt's parse of the project, started beside the load
(dayclose.dbt_runner.start_parse), which gives it up only every 5 ms. Measured on 31 days of sales
(720 batches, 3 M lines, 2 cores): the load alone 1.6 to 1.7 s; beside a thread running Python,
26.9 s with the checks in a thread (24.5 s of them checking), 3.6 to 4.2 s in a process (that
thread holds one of the two cores); in a cold first build, beside dbt's parse, 4.3 to 5.1 s
against 2.7 to 3.0 s.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dayclose
from dayclose.loader.contract import Batch, ManifestMismatch, data_files, read_manifest
from dayclose.loader.prepass import FileScan, sanitize, scan

CHUNK = 16  # batches a request to the check process holds
IN_FLIGHT = 2  # requests sent ahead of the answers read: the process works while one is taken
SERVE = "from dayclose.loader.check import serve; serve()"  # the child's program


@dataclass
class CheckedFile:
    """A file of a batch, checked: what the engine reads, and the lines to put back after."""

    name: str
    scan: FileScan
    read_path: Path  # the file itself, or its sanitized copy
    replaced: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass
class CheckedBatch:
    """A batch checked against its manifest, ready to write, or the reason it is refused."""

    batch: Batch
    sha: str | None
    files: list[CheckedFile] = field(default_factory=list)
    problem: str | None = None

    @property
    def rows(self) -> int:
        return sum(f.scan.lines for f in self.files)


def check_batch(batch: Batch, spool: Path) -> CheckedBatch:
    """Read every file of a complete batch once: manifest, line counts, sha256, cleanliness.

    Pure file work, no warehouse: the loader runs it ahead of its writers (in a thread, or
    in a child process: checked_in_a_process).
    """
    try:
        manifest, sha = read_manifest(batch)
    except (ManifestMismatch, OSError) as exc:
        return CheckedBatch(batch, None, problem=str(exc))
    try:
        present = data_files(batch)
        missing = sorted(set(manifest) - set(present))
        extra = sorted(set(present) - set(manifest))
        if missing:
            raise ManifestMismatch(f"{', '.join(missing)} listed in _SUCCESS but not in the folder")
        if extra:
            raise ManifestMismatch(f"{', '.join(extra)} in the folder but not listed in _SUCCESS")
        checked = CheckedBatch(batch, sha)
        for name in present:
            path = batch.path / name
            found = scan(path)
            expected = manifest[name]
            if found.lines != expected["rows"]:
                raise ManifestMismatch(f"{name} has {found.lines} lines, _SUCCESS says {expected['rows']}")
            if found.sha256 != expected["sha256"]:
                raise ManifestMismatch(f"{name} sha256 {found.sha256[:12]}... differs from _SUCCESS")
            file = CheckedFile(name, found, path)
            if not found.clean:
                file.read_path = spool / f"{batch.source}-{batch.batch_id}-{name}"
                file.replaced = sanitize(path, file.read_path, long_lines="long" in found.problems)
            checked.files.append(file)
    except (ManifestMismatch, OSError) as exc:
        return CheckedBatch(batch, sha, problem=str(exc))
    return checked


class CheckProcessFailed(RuntimeError):
    """The check process failed, or ended without answering (a bug, a kill; not a bad batch:
    those are answered as refused batches)."""


def checked_in_a_process(batches: list[Batch], spool: Path) -> Iterator[CheckedBatch]:
    """check_batch of each batch, in order, done by a child process.

    Requests of CHUNK batches, at most IN_FLIGHT sent ahead of the answer being read: the
    process is at most CHUNK * (IN_FLIGHT + 1) - 1 batches (and their sanitized copies) ahead
    of the batch handed out. The child imports this process's dayclose (its folder on
    PYTHONPATH, and -P: not the current folder's), answers on a copy of its stdout (whatever
    it prints goes to stderr), and answers an error with its traceback, then reads the
    requests left and ends. Closing the iterator ends the child.
    """
    chunks = [batches[i : i + CHUNK] for i in range(0, len(batches), CHUNK)]
    env = dict(os.environ)
    home = str(Path(dayclose.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH")) if p)
    child = subprocess.Popen(
        [sys.executable, "-P", "-c", SERVE, str(spool)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None
    answered_all = False
    try:
        sent = 0
        for answered, chunk in enumerate(chunks):
            try:
                while sent < len(chunks) and sent < answered + IN_FLIGHT:
                    pickle.dump(chunks[sent], child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                    child.stdin.flush()
                    sent += 1
                kind, answer = pickle.load(child.stdout)
            except (OSError, EOFError, pickle.UnpicklingError):  # gone, or cut off mid-answer
                raise CheckProcessFailed(
                    f"the process checking batches against their manifests ended (exit code "
                    f"{_ended(child)}) before answering for {chunk[0].batch_id} and after"
                ) from None
            if kind == "error":
                raise CheckProcessFailed(
                    f"the process checking batches against their manifests failed on the "
                    f"batches from {chunk[0].batch_id}:\n{answer}"
                )
            yield from answer
        answered_all = True
    finally:
        with contextlib.suppress(OSError):  # the end of the requests: a child that is done ends
            child.stdin.close()
        if not answered_all and child.poll() is None:
            child.kill()  # before its answers' pipe closes: it may be writing one
        child.stdout.close()
        child.wait()


def _ended(child: subprocess.Popen[bytes]) -> int:
    """The exit code of a child that stopped answering: its own if it ends within a second,
    else it is killed."""
    try:
        return child.wait(timeout=1)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def serve() -> None:
    """The check process: answers each request (a list of batches) with ("checked", their
    checks), until its input ends, or with ("error", the traceback) and ends. A Ctrl-C is
    the loader's (it ends this process). Spool folder: argv[1]."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spool = Path(sys.argv[1])
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever prints goes to stderr, not into the answers
    requests = sys.stdin.buffer
    while True:
        try:
            batches: list[Batch] = pickle.load(requests)
        except EOFError:
            return
        try:
            answer: tuple[str, object] = ("checked", [check_batch(batch, spool) for batch in batches])
        except Exception:  # noqa: BLE001 - handed to the loader, which raises it
            answer = ("error", traceback.format_exc())
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
        if answer[0] == "error":
            # the requests sent meanwhile read to their end, so that the loader's writes do not
            # break its pipe before it reads this answer
            while requests.read(1 << 16):
                pass
            return
