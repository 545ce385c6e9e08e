"""``--backend local`` on the real llama.cpp server and SmolLM2 (tiny max_tokens, few calls).

The episode test reads the server's own ``usage`` through a recording proxy on 127.0.0.1
(what the server answered, seen outside the back-end) and compares it with what the store
kept. The lifecycle tests start servers from child processes and kill those parents the
three ways a run ends badly; no server process may be left. The mid-run tests stand the
repo's fake OpenAI server, in a process of its own that exits after N completions, in for
the server process (the run talks HTTP to it and watches its exit as it would llama.cpp's).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from core.actions import Action
from core.backends import local_backend, registry
from core.backends import local_server as ls
from core.backends.base import AgentTurn
from core.backends.local_backend import LocalBackend
from core.backends.local_server import LocalServer, LocalServerConfig
from core.backends.openai_backend import OpenAIBackendConfig
from core.cli import main
from core.errors import UserError
from core.store.queries import get_run
from core.tasks.base import Task
from core.team import options
from tests.core.backends.proxy import RecordingProxy, star_eval_through

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = options.TeamOptions(backend="local")
"""The shipped model on the default engine, for the default team (the session's server)."""


def test_real_episode_stores_the_servers_usage(
    local_server: LocalServer, proxy: RecordingProxy, tmp_path: Path
) -> None:
    db = tmp_path / "real.duckdb"
    # A CLI process attaches to the session's server (through the proxy, same identity).
    proc = star_eval_through(proxy, local_server, db, "solver,analyst")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with duckdb.connect(str(db), read_only=True) as con:
        calls = con.execute(
            "SELECT prompt_tokens, completion_tokens, usage_reported, error FROM llm_calls "
            "ORDER BY seq"
        ).fetchall()
        runs = con.execute("SELECT backend, model FROM runs").fetchall()
    assert runs == [("local", "SmolLM2-135M-Instruct.Q4_1.as-q8_0")]
    assert len(calls) == len(proxy.usages) >= 2  # one call per agent at least
    assert all(reported and error is None for _, _, reported, error in calls)
    # The store orders calls by agent, the server saw them layer by layer: same multiset.
    stored = sorted((p, c) for p, c, _, _ in calls)
    served = sorted((u["prompt_tokens"], u["completion_tokens"]) for u in proxy.usages)
    assert stored == served
    assert all(0 < c <= 8 for _, c in served)


def test_in_process_runs_share_the_sessions_server(local_server: LocalServer) -> None:
    assert ls.serve(registry.local_model_server(SHIPPED)) is local_server
    assert local_server.gone() is None


# --------------------------------------------------------------------------- lifecycle

PARENT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it
from core.backends.local_server import LocalServerConfig, serve
engine = sys.argv[1]
server = serve(LocalServerConfig(n_ctx=512, engine=engine, slots=2 if engine == "native" else 1))
print(server.pid, flush=True)
time.sleep(120)
"""


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (the native engine's keeper runs llama-server)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("engine", ls.ENGINES)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_server_outlives_its_parent(sig: signal.Signals, engine: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != ls.ATTACH_ENV}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, engine],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    server_pid = None
    engine_pids: list[int] = []
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), parent.stderr.read() if parent.stderr else ""
        server_pid = int(line)
        assert alive(server_pid)
        engine_pids = children(server_pid)
        assert len(engine_pids) == (1 if engine == "native" else 0)  # llama-server itself
        parent.send_signal(sig)
        parent.wait(timeout=30)
        for pid in (server_pid, *engine_pids):
            assert wait_gone(pid), f"server {pid} outlived its parent ({sig.name}, {engine})"
    finally:
        parent.kill()
        parent.wait()
        for pid in [server_pid, *engine_pids] if server_pid is not None else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_server_that_dies_fails_the_call_at_once() -> None:
    server = ls.serve(LocalServerConfig(n_ctx=512))
    backend = LocalBackend(
        server,
        OpenAIBackendConfig(
            model=server.model.name, base_url=server.url, concurrency=1, use_cache=False,
            max_tokens=4, max_attempts=4,
        ),
    )  # fmt: skip
    try:
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait()
        task = Task("m", "math", "math", "What is 2 + 3?", "5")
        turn = AgentTurn(task, 0, "solver", 0, 1, Action.SOLO_PROCESS, None)

        async def play():
            try:
                return await backend.agent_turn(turn)
            finally:
                await backend.aclose()

        import asyncio

        result = asyncio.run(play())
        assert result.failed and result.call.retries == 0
        assert "exited mid-run" in (result.call.error or "")
    finally:
        server.stop()


# --------------------------------------------------------------------------- mistakes


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    return err


EVAL = ["eval", "--backend", "local", "--benchmark", "math", "--policy", "star",
        "--episodes", "1", "--no-log"]  # fmt: skip


def test_bad_model_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    assert "not a GGUF model" in run_main([*EVAL, "--model-file", str(fake)], capsys)
    missing = tmp_path / "missing.gguf"
    assert "does not exist" in run_main([*EVAL, "--model-file", str(missing)], capsys)
    assert "is not a regular file" in run_main([*EVAL, "--model-file", str(tmp_path)], capsys)


def test_flags_of_the_other_backends_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--model-file" in run_main([*EVAL, "--base-url", "http://127.0.0.1:1/v1"], capsys)
    assert "--model-file is for --backend local" in run_main(
        ["eval", "--backend", "sim", "--model-file", "x.gguf", "--benchmark", "math"], capsys
    )


def test_missing_llama_cpp_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # find_spec then reports it missing
    with pytest.raises(UserError, match=r"not installed.*bash scripts/setup\.sh"):
        ls.serve(LocalServerConfig(n_ctx=640, engine="python"))  # not the session's: it must start


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
LOCAL_COMMANDS = ("eval", "train", "compare", "robustness", "sweep")
"""The commands that run ``--backend local``."""


@pytest.fixture(scope="module")
def real_flags() -> set[str]:
    """Every flag of the commands that run ``--backend local``, read from their ``--help``."""
    flags: set[str] = set()
    for command in LOCAL_COMMANDS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main([command, "--help"]) == 0
        flags |= set(FLAG.findall(out.getvalue()))
    assert {"--model-file", "--backend", "--budget-tokens"} <= flags
    return flags


def raised_texts(module: object) -> list[str]:
    """The text pieces of every ``raise ...Error(...)``/``...Gone(...)`` in ``module``."""
    texts = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = getattr(node.exc.func, "id", "")
            if name.endswith(("Error", "Gone")):
                texts += [
                    c.value
                    for c in ast.walk(node.exc)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
    return texts


def test_the_local_back_ends_messages_name_only_flags_that_exist(real_flags: set[str]) -> None:
    named = {
        flag
        for module in (ls, local_backend, registry, options)
        for text in raised_texts(module)
        for flag in FLAG.findall(text)
    }
    assert "--model-file" in named  # the scan reads the messages
    assert named <= real_flags, f"messages name flags no command has: {named - real_flags}"


def test_a_taken_port_is_one_sentence(real_flags: set[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is in use") as err:
            ls.serve(LocalServerConfig(port=port, n_ctx=768))
    # No flag sets the port: the sentence names the setting, and no flag that does not exist.
    assert "LocalServerConfig.port" in str(err.value)
    assert set(FLAG.findall(str(err.value))) <= real_flags


# --------------------------------------------------------------------------- server gone mid-run


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``(model_file, start)``: ``start(exit_after)`` runs the fake OpenAI server in a process
    of its own and makes it the server this process runs for ``model_file`` (a GGUF header
    of its own: never the session's model), so ``--backend local --model-file`` uses it."""
    model_file = tmp_path / "stand-in.gguf"
    model_file.write_bytes(b"GGUF" + os.urandom(32))
    # Slots for ONE_CALL's team (one agent and the decision agent), as a run asks.
    model = ls.resolve(LocalServerConfig(model_file=str(model_file), slots=2))
    procs: list[subprocess.Popen] = []

    def start(exit_after: int | None = None) -> LocalServer:
        argv = [sys.executable, "-m", "tests.core.backends.fake_openai"]
        argv += ["--exit-after", str(exit_after)] if exit_after else []
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            text=True, cwd=ROOT,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        server = LocalServer(model, url, proc, tmp_path / "server.log")
        monkeypatch.setitem(ls._SERVERS, model.identity, server)
        return server

    yield model_file, start
    for proc in procs:
        proc.kill()
        proc.wait()


ONE_CALL = ["--benchmark", "math", "--agents", "solver", "--rounds", "1", "--no-cache"]
"""One agent, one round: one completion per episode (the decision agent passes it on)."""


def stopped_run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[str, str]:
    """Run ``args``; it must stop with one sentence naming the server's exit: that sentence
    and the run id it names."""
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    err = err.strip().splitlines()[-1]  # train prints its estimate first
    assert err.startswith("error: ") and "exited mid-run" in err
    found = re.search(r"--resume ([\w-]+)`", err)
    assert found, err
    return err, found.group(1)


def calls(db: Path, run: str) -> list[tuple[int, str | None]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT episode, error FROM llm_calls WHERE run_id = ? ORDER BY episode", [run]
        ).fetchall()


def test_eval_stops_when_its_server_exits_and_resumes(
    stand_in, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_file, start = stand_in
    db = tmp_path / "e.duckdb"
    start(exit_after=3)
    _, run = stopped_run(
        capsys,
        ["eval", "--backend", "local", "--model-file", str(model_file), *ONE_CALL,
         "--policy", "single", "--episodes", "6", "--concurrency", "1", "--db", str(db)],
    )  # fmt: skip
    info = get_run(str(db), run)
    assert info.status == "interrupted" and "exited mid-run" in info.message
    # The episodes played while it answered are logged, whole; the one it died in is not.
    assert calls(db, run) == [(0, None), (1, None), (2, None)]
    start()  # a server again: the run goes on after its last logged episode
    assert main(["eval", "--resume", run, "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    assert calls(db, run) == [(k, None) for k in range(6)]
    assert get_run(str(db), run).status == "finished"


def test_train_stops_when_its_server_exits_keeps_its_checkpoint_and_resumes(
    stand_in, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_file, start = stand_in
    db, out = tmp_path / "t.duckdb", tmp_path / "t.pt"
    team = ["--backend", "local", "--model-file", str(model_file), *ONE_CALL]
    # No budget: the estimate is arithmetic and sends nothing (core/experiment/budget.py);
    # then batches of 2 episodes of 1-2 calls each.
    start(exit_after=5)
    err, run = stopped_run(
        capsys,
        ["train", *team, "--episodes", "8", "--n-envs", "2", "--hidden", "8",
         "--eval-episodes", "0", "--out", str(out), "--db", str(db)],
    )  # fmt: skip
    info = get_run(str(db), run)
    logged = {episode for episode, _ in calls(db, run)}
    assert info.status == "interrupted" and f"checkpoint {out}" in err
    assert logged == set(range(len(logged))) and len(logged) in (2, 4, 6)
    assert all(error is None for _, error in calls(db, run))
    assert out.is_file() and info.checkpoint_episode == len(logged) - 1
    start()
    assert main(["train", "--resume", run, "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 8
    assert {episode for episode, _ in calls(db, run)} == set(range(8))
    assert get_run(str(db), run).status == "finished"
    # A learned-topology method stops the same way (it keeps no learner state to resume).
    start(exit_after=5)
    code = main(
        ["train", *team, "--method", "gptswarm", "--episodes", "8", "--n-envs", "2",
         "--eval-episodes", "0", "--out", str(tmp_path / "g.pt"), "--db", str(db)]
    )  # fmt: skip
    message = capsys.readouterr().err
    assert code == 2 and "exited mid-run" in message and "train it again" in message


def test_the_server_takes_the_cores_that_are_idle_when_it_starts():
    """Two threads on a quiet 2-core machine, one when another process keeps a core busy
    (measured from /proc/stat, not the load average, which lags a minute); a configured
    count wins; the settings that decide whether a server can be shared do not change
    with the load."""
    cores = os.cpu_count() or 1
    assert 1 <= ls.idle_cores() <= cores
    assert ls.LocalServerConfig(n_threads=3).threads() == 3
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = ls.idle_cores(window_s=1.0)
    finally:
        burner.kill()
        burner.wait()
    assert busy <= max(1, cores - 1)
    model = ls.resolve(ls.LocalServerConfig())
    assert '"n_threads": "idle cores"' in model.identity


def test_the_local_model_writes_its_requests_with_its_own_recipe(local_server: LocalServer):
    """Shorter completion caps for maths and multiple choice and a shorter cut of earlier
    replies than other back-ends (benchmarks/RESULTS.md, "Threads and the local model's
    recipe"), each agent's requests written as one conversation (the server keeps earlier
    states in its prompt cache), in force in the back-end and stored in the run's config;
    ``--max-tokens`` and ``--prompt-layout`` still win."""
    from core.backends.local_backend import (
        LOCAL_CONVERSATION_TOKENS,
        LOCAL_MAX_TOKENS,
        LOCAL_PEER_CHARS,
    )
    from core.backends.openai_backend import MAX_TOKENS
    from core.backends.prompts import PEER_TEXT_CHARS

    local = options.TeamOptions(backend="local", benchmark="math")
    backend = local.make_backend()
    assert backend.config.completion_caps == LOCAL_MAX_TOKENS
    assert backend.config.peer_chars == LOCAL_PEER_CHARS < PEER_TEXT_CHARS
    assert LOCAL_MAX_TOKENS[("math", "agent")] < MAX_TOKENS[("math", "agent")]
    assert LOCAL_MAX_TOKENS[("code", "agent")] < MAX_TOKENS[("code", "agent")]
    stored = local.run_config()["prompting"]
    assert stored["max_tokens"]["math/agent"] == LOCAL_MAX_TOKENS[("math", "agent")]
    assert stored["peer_chars"] == LOCAL_PEER_CHARS
    assert backend.config.prompt_layout == stored["layout"] == "conversation"
    budget = backend.config.conversation_tokens
    assert budget == stored["conversation_tokens"] == LOCAL_CONVERSATION_TOKENS
    # A conversation at its budget still has room for a new message and the longest reply.
    assert budget + 1000 + max(LOCAL_MAX_TOKENS.values()) < local_server.model.config.n_ctx
    assert local_server.model.config.prompt_cache_mb > 0
    capped = options.TeamOptions(
        backend="local", benchmark="math", max_tokens=8, prompt_layout="fresh"
    )
    assert set(capped.run_config()["prompting"]["max_tokens"].values()) == {8}
    assert capped.make_backend().config.prompt_layout == "fresh"
    assert capped.run_config()["prompting"]["layout"] == "fresh"
    assert backend.config.prompt_style == "full" and "style" not in stored
    compact = options.TeamOptions(backend="local", benchmark="math", prompt_style="compact")
    assert compact.make_backend().config.prompt_style == "compact"
    assert (
        compact.run_config()["prompting"]["max_tokens"]["math/agent"]
        < stored["max_tokens"]["math/agent"]
    )
    remote = options.TeamOptions(backend="openai", model="m", base_url="http://127.0.0.1:9/v1")
    assert remote.run_config()["prompting"]["layout"] == "fresh"
    assert remote.run_config()["prompting"]["conversation_tokens"] is None
    assert "prompting" not in options.TeamOptions().run_config()  # the simulator is asked nothing


def test_the_prompt_cache_restores_states_without_keeping_their_logits() -> None:
    """The server's prompt cache (:func:`local_server.prompt_state_cache`) keeps no copy of
    the model's logits beside a state (100 MB each for SmolLM2, uncounted against the
    capacity), and a request whose prompt it restores completes exactly as one computed
    from scratch: the real model, in process, seeded."""
    from llama_cpp import Llama

    chats = [
        [{"role": "user", "content": "What is 12 + 7 * 3? Think step by step."}],
        [
            {"role": "user", "content": "What is 12 + 7 * 3? Think step by step."},
            {"role": "assistant", "content": "12 + 21."},
            {"role": "user", "content": "Go on."},
        ],
    ]

    def replies(cache: object | None) -> tuple[list[str], Llama]:
        llm = Llama(model_path=str(ls.default_model_file()), n_ctx=512, n_threads=1, verbose=False)
        if cache is not None:
            llm.set_cache(cache)
        out = []
        for chat in (*chats, *chats):  # the second pass starts from restored states
            llm.reset()  # no reuse of the context's own prefix: only the cache can help
            r = llm.create_chat_completion(messages=chat, max_tokens=12, seed=3)
            out.append(r["choices"][0]["message"]["content"])
        return out, llm

    cache = ls.prompt_state_cache(64 << 20)
    cached, llm = replies(cache)
    assert cached == replies(None)[0]
    states = list(cache.cache_state.values())
    assert len(states) == 2 and all(s.n_tokens > 0 for s in states)
    for s in states:
        assert s.scores.strides == (0, 0)  # one float shared by the whole view: no copy
        assert s.scores.shape[1] == llm.n_vocab()
    assert cache.cache_size == sum(s.llama_state_size for s in states) <= 64 << 20


# --------------------------------------------------------------------------- weights


def file_type(path: Path) -> int:
    """The GGUF file's ``general.file_type`` (llama.cpp's weight type), read by llama.cpp."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return int(llm.metadata["general.file_type"])
    finally:
        llm.close()


def test_the_shipped_model_is_served_as_a_q8_0_copy_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local recipe serves the shipped Q4_1 model as a Q8_0 copy, made once in the cache
    folder, under its own name and digest (runs and the response cache tell the two apart);
    a user's ``--model-file`` is served as it is."""
    monkeypatch.setattr(ls, "CONVERTED_MODELS", tmp_path / "models")
    source = ls.default_model_file()
    model = ls.resolve(registry.local_model_server(SHIPPED))
    assert model.path.parent.parent == tmp_path / "models"
    assert model.name == "SmolLM2-135M-Instruct.Q4_1.as-q8_0"
    assert model.name == options.TeamOptions(backend="local").model_name()
    assert file_type(source) == 3 and file_type(model.path) == ls.WEIGHT_TYPES["q8_0"] == 7
    assert model.digest != ls.file_digest(source)
    assert model.cache_endpoint != ls.resolve(LocalServerConfig()).cache_endpoint
    made = model.path.stat()
    again = ls.resolve(registry.local_model_server(SHIPPED))
    assert again.path == model.path and again.identity == model.identity
    assert (again.path.stat().st_ino, again.path.stat().st_mtime_ns) == (
        made.st_ino, made.st_mtime_ns,
    )  # fmt: skip
    assert [p.name for p in model.path.parent.iterdir()] == [model.path.name]  # no part left
    own = registry.local_model_server(options.TeamOptions(backend="local", model_file=str(source)))
    assert own.weights is None and ls.resolve(own).path == source


def test_a_converted_copy_never_writes_over_what_is_not_a_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory or a symlink where the copy goes: one sentence, left as it was; a
    half-written or foreign regular file there: made again; a cache folder that cannot be
    made: one sentence naming the variable that moves it."""
    monkeypatch.setattr(ls, "CONVERTED_MODELS", tmp_path / "models")
    source = ls.default_model_file()
    target = (
        ls.CONVERTED_MODELS / ls.file_digest(source) / "SmolLM2-135M-Instruct.Q4_1.as-q8_0.gguf"
    )
    target.parent.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("not a model")
    for make in (target.mkdir, lambda: target.symlink_to(outside)):
        make()
        with pytest.raises(UserError, match="is not a regular file; remove it") as err:
            ls.resolve(registry.local_model_server(SHIPPED))
        assert "\n" not in str(err.value)
        assert target.is_symlink() or target.is_dir()
        target.unlink() if target.is_symlink() else target.rmdir()
    assert outside.read_text() == "not a model"
    target.write_bytes(b"half a file")
    assert ls.resolve(registry.local_model_server(SHIPPED)).path == target
    assert target.read_bytes()[:4] == b"GGUF"
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setattr(ls, "CONVERTED_MODELS", blocker / "models")
    with pytest.raises(UserError, match="set XDG_CACHE_HOME to a folder you can write"):
        ls.resolve(registry.local_model_server(SHIPPED))


def test_a_conversion_that_overruns_is_one_sentence_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ls, "CONVERTED_MODELS", tmp_path / "models")
    monkeypatch.setattr(ls, "CONVERT_TIMEOUT_S", 0.01)
    with pytest.raises(UserError, match=r"took over 0 s; .* run again\.$") as err:
        ls.resolve(registry.local_model_server(SHIPPED))
    assert "\n" not in str(err.value)
    assert [p for p in (tmp_path / "models").rglob("*") if p.is_file()] == []
