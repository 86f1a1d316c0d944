#!/usr/bin/env bash
# Runs the README's "Run a gateway pair" blocks in order, pasted into one
# shell as a newcomer would, and checks that every output the README shows
# (a line `# {...}` right after a command) is printed. Needs curl and the
# release build (`cargo build --release`). Ports 4433-4435, 8080-8082, 8545
# and 9090 on 127.0.0.1 must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import re, sys
text = open("README.md").read()
section = text[text.index("## Run a gateway pair"):text.index("### Trust")]
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
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
