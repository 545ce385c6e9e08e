"""Per-run append-only spools: how a producer logs without holding the DuckDB file.

Layout next to the database ``X.duckdb``::

    X.duckdb.spool/<run_id>.lock               held with flock(LOCK_EX) while the producer lives
    X.duckdb.spool/<run_id>.<seq>.v4.jsonl     segments of one JSON line per event, in order

A line is one event: the run's row (``run``), a whole episode (``ep``), training metrics
(``metrics``), a checkpoint (``ckpt``) or the end of the run (``end``). Each line is
written with one ``write`` and ends with ``\\n``, so a reader only ever consumes complete
lines; a producer killed mid-write leaves a partial last line, which is ignored (that is
the episode in flight). The kernel drops the flock when the producer dies, so a free
lock means "orphaned spool": whoever next opens the store ingests it and marks the run
interrupted.

An episode line is columnar: per table one JSON object of column -> list of values (plus
the ``episodes`` row as one object), every column always present, timestamps as epoch
microseconds, edges as ``[src, dst]`` pairs. That is cheap to write (one ``attrgetter``
pass per table, no dict per row) and lets DuckDB's JSON reader turn a batch of lines into
rows with ``json_transform_strict`` + ``unnest`` and no per-row Python work
(:mod:`core.store.ingest`). An episode line also carries, once per run, each prompt a
real back-end sent (``prompts``: hash, messages as JSON text, characters); later calls
with the same prompt carry only its hash (``llm_calls.messages_hash``).

The line format is :data:`SPOOL_FORMAT`, in the segment's name (``.v4``). Older segments
left by a crash before an upgrade are converted line by line (:func:`upgrade`): ``.v3``
lacks ``episodes.pass_through``, ``.v2`` the prompts, a name without a version holds the
row-per-object format of version 1.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import weakref
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson

from core.records import Chat, EpisodeRecord, prompt_digest
from core.store.schema import TABLES

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"^(?P<run>.+)\.(?P<seq>\d{6})(?:\.v(?P<format>\d+))?\.jsonl$")
SPOOL_FORMAT = 4
"""The line format this program writes (3: before ``episodes.pass_through``; 2: before
prompts; 1: a JSON object per row)."""
_STANDARD_FAILURE_KEYS = ("agent", "mode", "from_round")
_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
_SURROGATE = re.compile("[\ud800-\udfff]")


def _columns(table: str, *derived: str) -> tuple[str, ...]:
    """A table's columns that an episode line carries (not the key, not ``derived`` ones)."""
    skip = {"run_id", "episode", *derived}
    return tuple(c.name for c in TABLES[table] if c.name not in skip)


SPOOL_COLUMNS: dict[str, tuple[str, ...]] = {
    "episodes": _columns("episodes"),
    "rounds": _columns("rounds"),
    "agent_steps": _columns("agent_steps", "seq") + ("seq",),
    "messages": _columns("messages", "seq") + ("seq",),
    "llm_calls": _columns("llm_calls", "seq") + ("seq",),
    "prompts": ("messages_hash", "messages", "n_chars"),
}
"""Columns of each episode table in an episode line (``seq`` is the position in its list;
a prompt's ``first_run_id`` is the segment's run)."""
_ADDED_IN_V3 = {"llm_calls": ("messages_hash",)}
"""Columns the line format 3 added (older lines are converted with them null)."""

METRIC_COLUMNS = tuple(c.name for c in TABLES["train_metrics"] if c.name != "run_id")
"""Columns of a metrics row in a spool line (every one present, missing values null)."""

# One C-level pass per object: attrgetter of the record's fields, named like the columns.
_GET = {
    "rounds": attrgetter(*SPOOL_COLUMNS["rounds"]),
    "agent_steps": attrgetter(*SPOOL_COLUMNS["agent_steps"][:-1]),
    "messages": attrgetter(*SPOOL_COLUMNS["messages"][:-1]),
    # messages_hash is derived from the prompt (see episode_event), seq from the position.
    "llm_calls": attrgetter(*SPOOL_COLUMNS["llm_calls"][:-2]),
}
_PROMPT = attrgetter("prompt")


def spool_dir_for(db_path: Path) -> Path:
    """The spool folder that belongs to a database file."""
    return db_path.with_name(db_path.name + ".spool")


def _json_default(obj: Any) -> Any:
    # torch tensors and other array-likes that slip into records (Q-values, weights).
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot store {type(obj).__name__} in the episode store")


def dumps(event: dict[str, Any]) -> bytes:
    """One spool line (NaN and infinities become null; lone surrogates become U+FFFD)."""
    try:
        return orjson.dumps(event, default=_json_default, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError:
        # The last line of defence: a lone surrogate (a model reply that escaped the
        # back-end's cleaning) is not UTF-8 and would lose the whole episode.
        return orjson.dumps(_no_surrogates(event), default=_json_default, option=_DUMPS_OPTIONS)


def _no_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_no_surrogates(k): _no_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_surrogates(v) for v in value]
    return value


# ----------------------------------------------------------------------------- flattening


def _failure(f: dict[str, Any]) -> dict[str, Any]:
    extra = {k: v for k, v in f.items() if k not in _STANDARD_FAILURE_KEYS}
    return {
        "agent": f.get("agent"),
        "mode": f.get("mode"),
        "from_round": f.get("from_round"),
        "extra": json.dumps(extra, sort_keys=True) if extra else None,
    }


def _column_block(table: str, objs: list[Any], seq: list[int] | None = None) -> dict[str, Any]:
    """``{column: values}`` of ``objs`` (every column, even for no objects)."""
    names = SPOOL_COLUMNS[table]
    if not objs:
        return dict.fromkeys(names, ())
    block = dict(zip(names, zip(*map(_GET[table], objs), strict=True), strict=False))
    if seq is not None:
        block["seq"] = seq
    return block


_NO_PROMPTS = dict.fromkeys(SPOOL_COLUMNS["prompts"], ())


def _prompts_block(
    sent: list[Chat | None], hashes: list[str | None], logged: set[str]
) -> dict[str, list]:
    """The prompts ``sent`` not in ``logged`` yet (each once); adds them to ``logged``."""
    block: dict[str, list] = {name: [] for name in SPOOL_COLUMNS["prompts"]}
    for prompt, digest in zip(sent, hashes, strict=True):
        if prompt is None or digest in logged:
            continue
        logged.add(digest)
        block["messages_hash"].append(digest)
        block["messages"].append(json.dumps(prompt, ensure_ascii=False))
        block["n_chars"].append(sum(len(m.get("content") or "") for m in prompt))
    return block


def episode_event(
    episode: int, rec: EpisodeRecord, created_us: int, logged_prompts: set[str] | None = None
) -> dict[str, Any]:
    """The spool event of one episode: its ``episodes`` row and columns for the other tables.

    No run id: a segment belongs to one run, the ingester adds it. ``logged_prompts``: the
    hashes of the prompts this run's spool already holds (updated); only new ones are written.
    """
    steps: list[Any] = []
    step_seq: list[int] = []
    messages: list[Any] = []
    message_seq: list[int] = []
    for r in rec.rounds:
        steps += r.steps
        step_seq += range(len(r.steps))
        messages += r.messages
        message_seq += range(len(r.messages))
    if rec.decision is not None:
        steps.append(rec.decision)
        step_seq.append(0)
    prompt = sum(s.prompt_tokens for s in steps)
    completion = sum(s.completion_tokens for s in steps)
    row = {
        "task_id": rec.task_id,
        "benchmark": rec.benchmark,
        "domain": rec.domain,
        "difficulty": rec.difficulty,
        "question": rec.question,
        "ground_truth": rec.ground_truth,
        "team_answer": rec.team_answer,
        "score": rec.score,
        "correct": rec.score >= 1.0,
        "reward": rec.reward,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "tokens": prompt + completion,
        "n_agents": len(rec.roles),
        "n_rounds": len(rec.rounds),
        "n_failed": len({f.get("agent") for f in rec.failures}),
        "failures": [_failure(f) for f in rec.failures],
        "roles": rec.roles,
        "policy": rec.policy,
        "seed": rec.seed,
        "backend": rec.backend,
        "model": rec.model,
        "created_at": created_us,
        "pass_through": rec.pass_through,
    }
    calls = _column_block("llm_calls", rec.calls, list(range(len(rec.calls))))
    sent = list(map(_PROMPT, rec.calls))
    if any(sent):  # a real back-end's calls (the synthetic society sends no prompt)
        hashes = [None if p is None else prompt_digest(p) for p in sent]
        logged = set() if logged_prompts is None else logged_prompts
        calls["messages_hash"] = hashes
        prompts = _prompts_block(sent, hashes, logged)
    else:
        calls["messages_hash"] = (None,) * len(sent)
        prompts = _NO_PROMPTS
    return {
        "t": "ep",
        "episode": episode,
        "episodes": row,
        "rounds": _column_block("rounds", rec.rounds),
        "agent_steps": _column_block("agent_steps", steps, step_seq),
        "messages": _column_block("messages", messages, message_seq),
        "llm_calls": calls,
        "prompts": prompts,
    }


def metrics_event(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The spool event of training-metric rows (absent fields become null)."""
    return {"t": "metrics", "train_metrics": [{c: r.get(c) for c in METRIC_COLUMNS} for r in rows]}


def upgrade(data: bytes, fmt: int) -> bytes:
    """Complete lines of a segment in line format ``fmt`` (1 to 3) in today's format.

    A line that is not an event of that format is passed on as it is; the ingester skips it.
    """
    out = []
    for line in data.splitlines():
        try:
            event = orjson.loads(line)
            if fmt < 2:
                event = _v1_to_v2(event)
            if fmt < 3:
                event = _v2_to_v3(event)
            out.append(dumps(_v3_to_v4(event)))
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            out.append(line + b"\n")
    return b"".join(out)


def _v3_to_v4(event: dict[str, Any]) -> dict[str, Any]:
    """Format 3 -> 4: an older program did not record why the decision agent made no call."""
    if event.get("t") == "ep":
        event["episodes"]["pass_through"] = None
    return event


def _v2_to_v3(event: dict[str, Any]) -> dict[str, Any]:
    """Format 2 -> 3: no call of an older program recorded its prompt."""
    if event.get("t") == "ep":
        for table, added in _ADDED_IN_V3.items():
            block = event[table]
            for column in added:
                block[column] = [None] * len(block["seq"])
        event["prompts"] = _NO_PROMPTS
    return event


def _v1_to_v2(event: dict[str, Any]) -> dict[str, Any]:
    if event.get("t") == "ep":
        row = dict(event["episodes"][0])
        upgraded = {"t": "ep", "episode": row.pop("episode"), "episodes": row}
        row.pop("run_id", None)
        for table in ("rounds", "agent_steps", "messages", "llm_calls"):
            rows = event[table]
            added = _ADDED_IN_V3.get(table, ())
            block = {c: [r[c] for r in rows] for c in SPOOL_COLUMNS[table] if c not in added}
            if table == "rounds":
                for key in ("edges", "dropped_edges"):
                    block[key] = [[(e["src"], e["dst"]) for e in es] for es in block[key]]
            upgraded[table] = block
        return upgraded
    if event.get("t") == "metrics":
        return metrics_event(event["train_metrics"])
    return event


def failures_from_rows(structs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Inverse of the failure flattening: standard keys that were absent come back absent."""
    out = []
    for f in structs or []:
        d = {k: f[k] for k in _STANDARD_FAILURE_KEYS if f[k] is not None}
        if f["extra"]:
            d.update(json.loads(f["extra"]))
        out.append(d)
    return out


# ----------------------------------------------------------------------------- writing


class SpoolStalled(Exception):
    """The disk did not take all of an append (full, quota, I/O error).

    ``kept`` bytes of it stay: the whole lines the disk took (a reader may have seen them
    already). The part of a line after them was cut off again, so the spool holds whole
    lines only.
    """

    def __init__(self, error: OSError, kept: int) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error
        self.kept = kept


class SpoolWriter:
    """The producer's side: holds the run's lock and appends lines to the current segment."""

    def __init__(self, spool_dir: Path, run_id: str, *, fsync: bool = False) -> None:
        spool_dir.mkdir(parents=True, exist_ok=True)
        self.dir = spool_dir
        self.run_id = run_id
        self.fsync = fsync
        # Lock a private file first, then rename it into place: nobody can ever see the
        # final lock file unlocked while this producer lives.
        tmp = spool_dir / f"{run_id}.lock.{os.getpid()}.tmp"
        self._lock_fd = os.open(tmp, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, self.lock_path)
        existing = [seq for seq, _ in segments(spool_dir, run_id)]
        self.seq = max(existing, default=-1) + 1
        self._fd = self._open_segment()
        _PRODUCERS.add(self)

    @property
    def lock_path(self) -> Path:
        return self.dir / f"{self.run_id}.lock"

    @property
    def segment_path(self) -> Path:
        return segment_path(self.dir, self.run_id, self.seq)

    def _open_segment(self) -> int:
        return os.open(self.segment_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, data: bytes) -> None:
        """Append whole lines; one write call per batch so a line is never interleaved.

        :class:`SpoolStalled` if the disk does not take all of them: the whole lines it
        took stay, the piece of a line after them is cut off.
        """
        start = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            if self.fsync:
                os.fsync(self._fd)
        except OSError as err:
            written = len(data) - len(view)
            kept = data.rfind(b"\n", 0, written) + 1
            # Shrinking a file needs no space. Readers consume complete lines only, so
            # nobody has seen the piece cut off; the complete lines before it stay.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start + kept)
            raise SpoolStalled(err, kept) from err

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def rotate(self) -> Path:
        """Start a new segment; the caller deletes the returned, fully ingested one."""
        old = self.segment_path
        old_fd = self._fd
        self.seq += 1
        try:
            self._fd = self._open_segment()
        except OSError:
            # No room for a new file: keep appending to the current one.
            self.seq -= 1
            raise
        os.close(old_fd)
        return old

    def close(self, *, remove: bool) -> None:
        """Release the lock; ``remove`` deletes the (fully ingested) spool files."""
        if self._lock_fd < 0:
            return  # a forked child's copy (:func:`_forsake_in_child`): not its run
        os.close(self._fd)
        if remove:
            for _, path in segments(self.dir, self.run_id):
                path.unlink(missing_ok=True)
            self.lock_path.unlink(missing_ok=True)
        os.close(self._lock_fd)

    def _forsake(self) -> None:
        """Close this process's copies of the files without touching them (a forked child)."""
        for fd in (self._fd, self._lock_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._lock_fd = -1


_PRODUCERS: weakref.WeakSet[SpoolWriter] = weakref.WeakSet()
"""The spool writers of this process (see :func:`_forsake_in_child`)."""


def _forsake_in_child() -> None:
    # A forked child (training's episode collector) shares its parent's open lock file, and
    # a flock is released only when every copy is closed: a SIGKILLed run's child, until it
    # noticed its parent's death, kept the run looking alive (``runs`` said "running" right
    # after the kill; seen in a test run). The child writes nothing of its parent's run.
    for writer in list(_PRODUCERS):
        writer._forsake()


os.register_at_fork(after_in_child=_forsake_in_child)


def segment_path(spool_dir: Path, run_id: str, seq: int) -> Path:
    return spool_dir / f"{run_id}.{seq:06d}.v{SPOOL_FORMAT}.jsonl"


def segment_format(segment: Path) -> int:
    """The line format of a segment, from its name (no version: format 1)."""
    m = _SEGMENT.match(segment.name)
    return int(m["format"]) if m is not None and m["format"] else 1


def segments(spool_dir: Path, run_id: str) -> list[tuple[int, Path]]:
    """The run's segments in write order."""
    out = []
    for p in spool_dir.glob(f"{glob_escape(run_id)}.*.jsonl"):
        m = _SEGMENT.match(p.name)
        if m and m["run"] == run_id:
            out.append((int(m["seq"]), p))
    return sorted(out)


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


# ----------------------------------------------------------------------------- reading


@dataclass
class RunSpool:
    """What is on disk for one run."""

    run_id: str
    segments: list[Path] = field(default_factory=list)
    has_lock: bool = False
    alive: bool = False


def list_spools(spool_dir: Path) -> dict[str, RunSpool]:
    """Every run with spool files, and whether its producer is alive (holds the flock)."""
    runs: dict[str, RunSpool] = {}
    if not spool_dir.is_dir():
        return runs
    for entry in os.scandir(spool_dir):
        name = entry.name
        if name.endswith(".lock"):
            rid = name[: -len(".lock")]
            runs.setdefault(rid, RunSpool(rid)).has_lock = True
        elif m := _SEGMENT.match(name):
            runs.setdefault(m["run"], RunSpool(m["run"])).segments.append(Path(entry.path))
    for spool in runs.values():
        spool.segments.sort()
        spool.alive = spool.has_lock and lock_held(spool_dir / f"{spool.run_id}.lock")
    return runs


def lock_held(path: Path) -> bool:
    """True if a live producer holds the flock on ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_complete(path: Path, offset: int) -> tuple[bytes, int]:
    """The complete lines of a segment after ``offset``, and the offset after the last one."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        # Deleted after being fully ingested (rotation or a finished run).
        return b"", offset
    end = data.rfind(b"\n") + 1
    return data[:end], offset + end
