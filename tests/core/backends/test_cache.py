"""The on-disk response cache: content addressing, atomic writes, corrupt entries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.backends.cache import ResponseCache, default_cache_dir, public_url, request_key


def test_key_is_canonical_and_content_addressed():
    a = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    b = {"temperature": 0.7, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    assert request_key(a) == request_key(b)
    assert request_key(a) != request_key({**a, "temperature": 0.0})
    assert len(request_key(a)) == 64


def test_put_get_sharded_and_corrupt_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path)
    key = request_key({"x": 1})
    assert cache.get(key) is None
    cache.put(key, {"text": "hello", "usage": None})
    assert cache.path(key) == tmp_path / key[:2] / f"{key}.json"
    assert cache.get(key) == {"text": "hello", "usage": None}
    assert len(cache) == 1
    cache.path(key).write_text('{"text": "hel')  # torn file from some other writer
    assert cache.get(key) is None


def test_default_dir_and_env_override(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTQMIX_CACHE", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "agentqmix" / "responses"
    monkeypatch.setenv("AGENTQMIX_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"


def test_public_url_drops_credentials():
    assert public_url("http://user:pw@host:8000/v1/") == "http://host:8000/v1"
    assert public_url(None) is None


def test_ctrl_c_while_writing_leaves_only_whole_entries(tmp_path):
    # A real process writing big entries in a loop, interrupted by SIGINT mid-stream.
    script = (
        # A shell's background job inherits SIGINT ignored, and Python then never turns it
        # into KeyboardInterrupt: ask for the usual handler, as an interactive run has it.
        "import signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from core.backends.cache import ResponseCache, request_key\n"
        "c = ResponseCache(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "i = 0\n"
        "while True:\n"
        "    c.put(request_key({'i': i}), {'text': 'x' * 200000, 'i': i})\n"
        "    i += 1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 120  # a hang guard: entries come slowly under load
        while len(list(tmp_path.glob("*/*.json"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:  # never leave a writer filling the disk behind a failure
            proc.kill()
            proc.wait()
    assert b"KeyboardInterrupt" in proc.stderr.read()
    files = list(tmp_path.glob("*/*.json"))
    assert len(files) > 1
    for f in files:
        entry = json.loads(f.read_text())  # every entry parses: no torn writes
        assert len(entry["text"]) == 200000
