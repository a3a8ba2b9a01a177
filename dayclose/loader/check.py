"""A batch's files checked against its manifest before anything of it is written: pure file work.

`check_batch` reads every file of a batch once (dayclose.loader.prepass): its line count and
sha256 against _SUCCESS, and whether the engine's reader can take it byte for byte (else a
sanitized copy in the spool, and the lines to put back).

The loader checks the batches ahead of its writers. Many batches are checked by a child process
(`checked_in_a_process`), not a thread: a check is a few C calls per file (read, sha256, the
byte counts), each of which gives up Python's lock and then waits to take it back, and in a run
the lock is mostly held by dbt's parse of the project, started beside the load
(dayclose.dbt_runner.start_parse), which gives it up only every few milliseconds: in a thread,
the checks would wait on the parse most of the time. Requests and answers cross the pipes as
JSON lines (data only: nothing the child sends back is executed).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
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
                    child.stdin.write(_line([_batch_json(b) for b in chunks[sent]]))
                    child.stdin.flush()
                    sent += 1
                kind, answer = json.loads(child.stdout.readline() or b"null") or (None, None)
                if kind is None:
                    raise EOFError
            except (OSError, EOFError, ValueError):  # gone, or cut off mid-answer
                raise CheckProcessFailed(
                    f"the process checking batches against their manifests ended (exit code "
                    f"{_ended(child)}) before answering for {chunk[0].batch_id} and after"
                ) from None
            if kind == "error":
                raise CheckProcessFailed(
                    f"the process checking batches against their manifests failed on the "
                    f"batches from {chunk[0].batch_id}:\n{answer}"
                )
            yield from (_checked_from(c) for c in answer)
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
    while request := requests.readline():
        try:
            batches = [_batch_from(b) for b in json.loads(request)]
            answer: tuple[str, object] = (
                "checked",
                [_checked_json(check_batch(batch, spool)) for batch in batches],
            )
        except Exception:  # noqa: BLE001 - handed to the loader, which raises it
            answer = ("error", traceback.format_exc())
        answers.write(_line(answer))
        answers.flush()
        if answer[0] == "error":
            # the requests sent meanwhile read to their end, so that the loader's writes do not
            # break its pipe before it reads this answer
            while requests.read(1 << 16):
                pass
            return


# The pipes' messages: one JSON document a line (json.dumps writes no newline inside one).


def _line(message: object) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _batch_json(batch: Batch) -> list[str]:
    return [batch.source, batch.batch_id, str(batch.path)]


def _batch_from(fields: list[str]) -> Batch:
    source, batch_id, path = fields
    return Batch(source, batch_id, Path(path))


def _checked_json(checked: CheckedBatch) -> dict:
    return {
        "batch": _batch_json(checked.batch),
        "sha": checked.sha,
        "problem": checked.problem,
        "files": [
            {
                "name": f.name,
                "scan": [f.scan.sha256, f.scan.size, f.scan.lines, sorted(f.scan.problems)],
                "read_path": str(f.read_path),
                "replaced": [[n, base64.b64encode(line).decode()] for n, line in f.replaced],
            }
            for f in checked.files
        ],
    }


def _checked_from(data: dict) -> CheckedBatch:
    files = []
    for f in data["files"]:
        sha256, size, lines, problems = f["scan"]
        replaced = [(n, base64.b64decode(line)) for n, line in f["replaced"]]
        files.append(
            CheckedFile(
                f["name"], FileScan(sha256, size, lines, set(problems)), Path(f["read_path"]), replaced
            )
        )
    return CheckedBatch(_batch_from(data["batch"]), data["sha"], files, data["problem"])
