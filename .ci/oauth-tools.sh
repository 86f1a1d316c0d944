#!/usr/bin/env bash
# Installs what the OAuth end-to-end test (cli/tests/oauth_e2e.rs) drives
# into target/oauth-tools: from npm, oidc-provider (an OAuth 2.1 / OpenID
# authorization server, run by cli/tests/oauth/as.mjs); from PyPI, the MCP
# Python SDK (its OAuth client, and the server classes of
# cli/tests/oauth/server.py), pinned in cli/tests/oauth/requirements.txt, in
# a virtual environment. Where a registry cannot be reached it says so
# loudly, and the test skips, saying so. Idempotent: what is there already
# is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=target/oauth-tools
mkdir -p "$dir"

if [ -x "$dir/venv/bin/python" ] && "$dir/venv/bin/python" -c 'import mcp.client.auth, jwt' 2>/dev/null; then
  echo "OAuth tools: the MCP Python SDK already in $dir/venv"
elif command -v python3 >/dev/null && python3 -m venv "$dir/venv" \
  && timeout 300 "$dir/venv/bin/pip" install -q --disable-pip-version-check \
       -r cli/tests/oauth/requirements.txt; then
  echo "OAuth tools: the MCP Python SDK installed in $dir/venv"
else
  echo "==== PyPI (or python3 -m venv) unavailable: the OAuth end-to-end test will be SKIPPED ===="
fi

provider=9.13.3
if [ -d "$dir/npm/node_modules/oidc-provider" ]; then
  echo "OAuth tools: oidc-provider already in $dir/npm"
elif command -v npm >/dev/null \
  && timeout 300 npm install --prefix "$dir/npm" --silent --no-audit --no-fund "oidc-provider@$provider"; then
  echo "OAuth tools: oidc-provider $provider installed in $dir/npm"
else
  echo "==== npm unavailable: the OAuth end-to-end test will be SKIPPED ===="
fi
# The authorization server's script sits beside the package it imports (ESM
# resolves a package from the script's folder).
if [ -d "$dir/npm/node_modules/oidc-provider" ]; then
  cp cli/tests/oauth/as.mjs "$dir/npm/as.mjs"
fi
exit 0
