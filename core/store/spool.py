"""Per-run append-only spools: how a producer logs without holding the DuckDB file.

Layout next to the database ``X.duckdb``::

    X.duckdb.spool/<run_id>.lock            held with flock(LOCK_EX) while the producer lives
    X.duckdb.spool/<run_id>.<seq>.jsonl     segments of one JSON line per event, in order

A line is one event: the run's row (``run``), a whole episode's rows (``ep``), training
metrics (``metrics``), a checkpoint (``ckpt``) or the end of the run (``end``). Each line
is written with one ``write`` and ends with ``\\n``, so a reader only ever consumes
complete lines; a producer killed mid-write leaves a partial last line, which is ignored
(that is the episode in flight). The kernel drops the flock when the producer dies, so a
free lock means "orphaned spool": whoever next opens the store ingests it and marks the
run interrupted. Each row is a JSON object keyed by column name (timestamps as epoch
microseconds), so Arrow's C++ JSON reader turns a whole batch of lines into columns with
no per-row Python work.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.records import AgentStep, EpisodeRecord

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"^(?P<run>.+)\.(?P<seq>\d{6})\.jsonl$")
_STANDARD_FAILURE_KEYS = ("agent", "mode", "from_round")


def spool_dir_for(db_path: Path) -> Path:
    """The spool folder that belongs to a database file."""
    return db_path.with_name(db_path.name + ".spool")


def _json_default(obj: Any) -> Any:
    # numpy / torch scalars and arrays that slip into records (Q-values, weights).
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot store {type(obj).__name__} in the episode store")


try:  # orjson writes a line ~6x faster than the standard library; optional.
    import orjson

    def dumps(event: dict[str, Any]) -> bytes:
        """One spool line (NaN and infinities become null)."""
        opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
        return orjson.dumps(event, default=_json_default, option=opts)

except ImportError:  # pragma: no cover - depends on the environment

    def dumps(event: dict[str, Any]) -> bytes:
        """One spool line."""
        return json.dumps(event, separators=(",", ":"), default=_json_default).encode() + b"\n"


# ----------------------------------------------------------------------------- flattening


def _step_row(run_id: str, episode: int, s: AgentStep, seq: int) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "episode": episode,
        "round": s.round,
        "seq": seq,
        "agent": s.agent,
        "role": s.role,
        "alive": s.alive,
        "fault": s.fault,
        "action": s.action,
        "q_values": s.q_values,
        "greedy": s.greedy,
        "epsilon": s.epsilon,
        "answer": s.answer,
        "confidence": s.confidence,
        "correct": s.correct,
        "text": s.text,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "read_from": s.read_from,
        "agreement": s.agreement,
        "verified": s.verified,
    }


def _failure(f: dict[str, Any]) -> dict[str, Any]:
    extra = {k: v for k, v in f.items() if k not in _STANDARD_FAILURE_KEYS}
    return {
        "agent": f.get("agent"),
        "mode": f.get("mode"),
        "from_round": f.get("from_round"),
        "extra": json.dumps(extra, sort_keys=True) if extra else None,
    }


def _edges(edges: list[tuple[int, int]]) -> list[dict[str, int]]:
    return [{"src": s, "dst": d} for s, d in edges]


def episode_event(run_id: str, episode: int, rec: EpisodeRecord, created_us: int) -> dict:
    """The spool event of one episode: its rows (JSON objects) for every episode table."""
    steps: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    prompt = completion = 0
    for r in rec.rounds:
        rounds.append(
            {
                "run_id": run_id,
                "episode": episode,
                "round": r.round,
                "edges": _edges(r.edges),
                "dropped_edges": _edges(r.dropped_edges),
                "layers": r.layers,
                "q_tot": r.q_tot,
                "mixer_weights": r.mixer_weights,
                "credit": r.credit,
            }
        )
        for seq, s in enumerate(r.steps):
            steps.append(_step_row(run_id, episode, s, seq))
            prompt += s.prompt_tokens
            completion += s.completion_tokens
        for seq, m in enumerate(r.messages):
            messages.append(
                {
                    "run_id": run_id,
                    "episode": episode,
                    "round": m.round,
                    "seq": seq,
                    "src": m.src,
                    "dst": m.dst,
                    "text": m.text,
                    "answer": m.answer,
                    "confidence": m.confidence,
                    "tokens": m.tokens,
                }
            )
    if rec.decision is not None:
        steps.append(_step_row(run_id, episode, rec.decision, 0))
        prompt += rec.decision.prompt_tokens
        completion += rec.decision.completion_tokens
    calls = [
        {
            "run_id": run_id,
            "episode": episode,
            "seq": seq,
            "agent": c.agent,
            "round": c.round,
            "prompt_hash": c.prompt_hash,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "usage_reported": c.usage_reported,
            "latency_s": c.latency_s,
            "retries": c.retries,
            "cache_hit": c.cache_hit,
            "error": c.error,
        }
        for seq, c in enumerate(rec.calls)
    ]
    episode_row = {
        "run_id": run_id,
        "episode": episode,
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
    }
    return {
        "t": "ep",
        "episodes": [episode_row],
        "rounds": rounds,
        "agent_steps": steps,
        "messages": messages,
        "llm_calls": calls,
    }


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

    @property
    def lock_path(self) -> Path:
        return self.dir / f"{self.run_id}.lock"

    @property
    def segment_path(self) -> Path:
        return segment_path(self.dir, self.run_id, self.seq)

    def _open_segment(self) -> int:
        return os.open(self.segment_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, data: bytes) -> None:
        """Append whole lines; one write call per batch so a line is never interleaved."""
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(self._fd)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def rotate(self) -> Path:
        """Start a new segment; the caller deletes the returned, fully ingested one."""
        old = self.segment_path
        os.close(self._fd)
        self.seq += 1
        self._fd = self._open_segment()
        return old

    def close(self, *, remove: bool) -> None:
        """Release the lock; ``remove`` deletes the (fully ingested) spool files."""
        os.close(self._fd)
        if remove:
            for _, path in segments(self.dir, self.run_id):
                path.unlink(missing_ok=True)
            self.lock_path.unlink(missing_ok=True)
        os.close(self._lock_fd)


def segment_path(spool_dir: Path, run_id: str, seq: int) -> Path:
    return spool_dir / f"{run_id}.{seq:06d}.jsonl"


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
