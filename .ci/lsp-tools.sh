#!/usr/bin/env bash
# Installs what the LSP tests (cli/tests/lsp.rs) drive into target/lsp-tools:
# from PyPI, python-lsp-server (pylsp, with pyflakes) and pygls, the client
# library of cli/tests/lsp/drive.py, pinned in cli/tests/lsp/requirements.txt,
# in a virtual environment; from npm, pyright's language server. Where a
# registry cannot be reached it says so loudly, and the tests that need what
# it would have installed skip, saying so. Idempotent: what is there already
# is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=target/lsp-tools
mkdir -p "$dir"

if [ -x "$dir/venv/bin/pylsp" ] && "$dir/venv/bin/python" -c 'import pygls' 2>/dev/null; then
  echo "LSP tools: pylsp and pygls already in $dir/venv"
elif command -v python3 >/dev/null && python3 -m venv "$dir/venv" \
  && timeout 300 "$dir/venv/bin/pip" install -q --disable-pip-version-check \
       -r cli/tests/lsp/requirements.txt; then
  echo "LSP tools: pylsp and pygls installed in $dir/venv"
else
  echo "==== PyPI (or python3 -m venv) unavailable: the LSP tests with pylsp will be SKIPPED ===="
fi

pyright=1.1.414
if [ -x "$dir/npm/node_modules/.bin/pyright-langserver" ]; then
  echo "LSP tools: pyright already in $dir/npm"
elif command -v npm >/dev/null \
  && timeout 300 npm install --prefix "$dir/npm" --silent --no-audit --no-fund "pyright@$pyright"; then
  echo "LSP tools: pyright $pyright installed in $dir/npm"
else
  echo "==== npm unavailable: the LSP tests with pyright will be SKIPPED ===="
fi
exit 0
