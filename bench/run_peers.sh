#!/usr/bin/env bash
# Runs bench/peers.py in its own venv (bench/.venv-peers) holding the peer frameworks
# (LangGraph, LangChain's OpenAI chat model, the OpenAI Agents SDK) next to drover installed
# from this checkout. Nothing is added to drover's own dependencies or venv.
#
#   bash bench/run_peers.sh            # create/refresh the venv, then run the benchmark
#   PEERS_SKIP_INSTALL=1 bash bench/run_peers.sh   # reuse the venv as it is
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="$here/.venv-peers"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip_install() {
    # pip warns about every configured index folder that does not exist; keep the rest.
    "$venv/bin/python" -m pip install --quiet "$@" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    return "${PIPESTATUS[0]}"
}
if [[ -z "${PEERS_SKIP_INSTALL:-}" ]]; then
    # One resolver run for drover and the peers, so a version conflict shows up here.
    # A peer that cannot be installed is reported by peers.py, which runs the others.
    if ! pip_install -e "$repo" -r "$here/peers_requirements.txt"; then
        echo "run_peers.sh: installing all peers together failed; installing them one by one" >&2
        pip_install -e "$repo" || echo "run_peers.sh: could not install drover" >&2
        while read -r req; do
            [[ -z "$req" || "$req" == \#* ]] && continue
            pip_install "$req" || echo "run_peers.sh: could not install $req" >&2
        done <"$here/peers_requirements.txt"
    fi
fi
cd "$repo"
exec "$venv/bin/python" "$here/peers.py" "$@"
