#!/usr/bin/env bash
# Runs the README's "Run a gateway pair" blocks in order, pasted into one
# shell as a newcomer would, and checks that every output the README shows
# (a line `# {...}` right after a command) is printed. Needs curl and the
# release build (`cargo build --release`). Ports 3002, 4433-4436,
# 8080-8083, 8545, 9000 and 9090 on 127.0.0.1 must be free. The OAuth block
# needs what .ci/oauth-tools.sh installs (npm's oidc-provider, PyPI's MCP
# SDK); where that could not be installed, the block is left out, saying so
# loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import re, sys
text = open("README.md").read()
section = text[text.index("## Run a gateway pair"):text.index("### Trust")]
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
import os
tools = "target/oauth-tools"
if not (os.path.exists(tools + "/venv/bin/python") and os.path.isdir(tools + "/npm/node_modules/oidc-provider")):
    print("==== the OAuth tools are not installed (.ci/oauth-tools.sh): the README's OAuth block is SKIPPED ====")
    blocks = [b for b in blocks if "oauth-tools" not in b]
script = "set -e\n" + "\n".join(blocks).replace("cargo build --release\n", "")
open(sys.argv[1] + "/blocks.sh", "w").write(script)
expected = [l[2:] for b in blocks for l in b.splitlines() if l.startswith("# {")]
open(sys.argv[1] + "/expected.txt", "w").write("\n".join(expected) + "\n")
PY
timeout 120 bash "$work/blocks.sh" >"$work/out.txt" 2>&1 || {
  echo "readme blocks failed:"; cat "$work/out.txt"; exit 1
}
missing=0
while IFS= read -r line; do
  if ! grep -qxF "$line" "$work/out.txt"; then
    echo "missing from the output: $line"; missing=1
  fi
done <"$work/expected.txt"
if [ "$missing" = 1 ]; then cat "$work/out.txt"; exit 1; fi
echo "readme blocks: $(wc -l <"$work/expected.txt") shown outputs printed, every process stopped"
