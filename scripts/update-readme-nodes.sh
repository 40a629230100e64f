#!/usr/bin/env bash
# Regenerates the README's node table from the registry (the RunnerTests check it is current).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VOICEPIPE:-.build/debug/voicepipe}
table=$("$bin" nodes --markdown)
python3 - "$table" <<'PY'
import sys, re
table = sys.argv[1].rstrip("\n")
text = open("README.md").read()
new = re.sub(r"<!-- nodes:begin -->.*?<!-- nodes:end -->", "<!-- nodes:begin -->\n" + table.replace("\\", "\\\\") + "\n<!-- nodes:end -->", text, flags=re.S)
open("README.md", "w").write(new)
PY
echo "README node table updated"
