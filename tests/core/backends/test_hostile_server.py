"""The real ``agentqmix eval`` against a hostile but well-formed OpenAI-compatible server.

The server (a real HTTP server on 127.0.0.1) answers 200 with what a careless client
chokes on or leaks: ``usage`` of strings, NaN, 1e30 or negative numbers; content with a
lone surrogate and a NUL; content echoing the Authorization header; answers that are
towers of powers. Each run must end with exit 0, no traceback, the run recorded, honest
token totals and no secret in any file the run wrote.

Hang guard: pytest-timeout is not installed, so the CLI runs as a subprocess with a
generous ``timeout=`` (``HANG_GUARD_S``); it is a guard against a hang, not a speed limit.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.core.backends.fake_openai import BAD_USAGE, FakeOpenAIServer, encoded_echoes

HANG_GUARD_S = 120.0
KEY = "sk-test-HOSTILE-key-0123456789"
URL_USER, URL_PASSWORD = "alice", "URLPASS-hostile-98765"


def eval_cli(server_url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OPENAI_API_KEY": KEY,
        "AGENTQMIX_CACHE": str(tmp_path / "cache"),
    }
    args = ["eval", "--benchmark", "math", "--policy", "full", "--episodes", "2"]
    args += ["--backend", "openai", "--base-url", server_url, "--model", "fake-model"]
    args += ["--db", str(tmp_path / "s.duckdb"), "--json", *extra]
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def finished(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def query(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def assert_no_secret_on_disk(root: Path, secrets: list[str]) -> None:
    """Grep the bytes of every file under ``root`` (database, spool, cache) for each secret."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".duckdb" for p in files) and any("cache" in p.parts for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} written to {path}"


def test_bad_usage_surrogates_and_echoed_key_are_contained(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.inject(*(["usage_string", "usage_nan", "usage_huge", "usage_negative"] * 2))
        server.inject("surrogate", "echo_auth", "surrogate", "echo_auth")
        proc = eval_cli(server.url, tmp_path)
        out = finished(proc)
        sent = list(server.requests)
    db = tmp_path / "s.duckdb"
    run = out["run_id"]
    assert out["episodes"] == 2 and len(sent) >= out["calls"] > 12
    assert query(db, f"SELECT status FROM runs WHERE id = '{run}'") == [("finished",)]

    # Tokens: exactly what the valid usages said; invalid ones count zero, never negative.
    valid = [r["usage"] for r in sent if r["usage_valid"]]
    assert len(valid) == len(sent) - 2 * len(BAD_USAGE)
    (pt, ct, unreported, negative) = query(
        db,
        "SELECT sum(prompt_tokens), sum(completion_tokens), "
        "count(*) FILTER (NOT usage_reported), "
        "count(*) FILTER (prompt_tokens < 0 OR completion_tokens < 0) "
        f"FROM llm_calls WHERE run_id = '{run}'",
    )[0]
    assert pt == sum(u["prompt_tokens"] for u in valid)
    assert ct == sum(u["completion_tokens"] for u in valid)
    assert unreported >= 1 and negative == 0
    ep_tokens = query(db, f"SELECT sum(tokens), min(tokens) FROM episodes WHERE run_id = '{run}'")
    assert ep_tokens[0][0] == pt + ct and ep_tokens[0][1] >= 0

    # The lone surrogate became U+FFFD and the NUL is gone, in the store and the cache.
    texts = [t for (t,) in query(db, f"SELECT text FROM agent_steps WHERE run_id = '{run}'")]
    broken = [t for t in texts if t and "Broken" in t]
    assert broken and all("\ufffd" in t and "\x00" not in t for t in broken)
    cached = "".join(p.read_text("utf-8") for p in (tmp_path / "cache").rglob("*.json"))
    assert "Broken \ufffd bytes here" in cached
    # The echoed header reached the store scrubbed.
    assert any("Authorization: Bearer ***" in t for t in texts if t)
    assert_no_secret_on_disk(tmp_path, [KEY])
    assert KEY not in proc.stdout + proc.stderr


def test_credentials_in_the_base_url_never_reach_disk(tmp_path: Path) -> None:
    basic = base64.b64encode(f"{URL_USER}:{URL_PASSWORD}".encode()).decode()
    with FakeOpenAIServer() as server:
        server.always = "echo_auth"
        url = server.url.replace("http://", f"http://{URL_USER}:{URL_PASSWORD}@")
        proc = eval_cli(url, tmp_path)
        out = finished(proc)
        # The server really received the credentials (as HTTP Basic auth) ...
        assert server.requests[0]["headers"]["authorization"] == f"Basic {basic}"
    db = tmp_path / "s.duckdb"
    # ... the run config keeps where it went, without them ...
    (config,) = query(db, f"SELECT config FROM runs WHERE id = '{out['run_id']}'")[0]
    assert "127.0.0.1" in config and URL_PASSWORD not in config
    # ... and neither the password, nor its Basic form, nor the key is stored, cached or shown.
    assert_no_secret_on_disk(tmp_path, [KEY, URL_PASSWORD, basic])
    for secret in (KEY, URL_PASSWORD, basic):
        assert secret not in proc.stdout + proc.stderr


def test_a_key_echoed_re_encoded_is_masked_before_it_is_stored(tmp_path: Path) -> None:
    """base64 (alone, inside a blob, URL-safe at an odd offset), percent-encoding, hex,
    reversed in pieces and spelled out: none of it reaches the store, the cache or the
    terminal; a password in the base URL likewise."""
    with FakeOpenAIServer() as server:
        server.always = "echo_encoded"
        out = finished(eval_cli(server.url, tmp_path))
        url = server.url.replace("http://", f"http://{URL_USER}:{URL_PASSWORD}@")
        out_url = finished(eval_cli(url, tmp_path, "--no-cache"))
    db = tmp_path / "s.duckdb"
    texts = [t for (t,) in query(db, "SELECT text FROM agent_steps WHERE text IS NOT NULL")]
    runs = {out["run_id"], out_url["run_id"]}
    assert len(runs) == 2 and sum("reversed in pieces: ***" in t for t in texts) >= 2
    forms = encoded_echoes(KEY) + encoded_echoes(f"{URL_USER}:{URL_PASSWORD}")
    needles = [form.split(": ", 1)[1] for form in forms]
    # Each form's payload, and every 10-character run of the secrets forwards and back.
    for secret in (KEY, URL_PASSWORD):
        needles += [secret[i : i + 10] for i in range(len(secret) - 9)]
        needles += [secret[::-1][i : i + 10] for i in range(len(secret) - 9)]
    assert_no_secret_on_disk(tmp_path, needles)


def test_tower_of_powers_answers_are_scored_wrong_and_eval_finishes(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.always = "tower"
        out = finished(eval_cli(server.url, tmp_path, "--no-cache"))
        assert server.request_count >= out["calls"] > 0
    assert out["episodes"] == 2 and out["accuracy"] == 0.0
    rows = query(
        tmp_path / "s.duckdb",
        f"SELECT team_answer, score FROM episodes WHERE run_id = '{out['run_id']}'",
    )
    assert len(rows) == 2 and all(score == 0.0 for _, score in rows)
    assert all("^" in answer or "**" in answer for answer, _ in rows)
