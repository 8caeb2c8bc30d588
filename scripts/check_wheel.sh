#!/usr/bin/env bash
# The wheel works alone: built from this checkout, installed with [hf] into a fresh venv outside
# the repository, and run from there (solve on the embedded models, the tree viewer, the import).
# It fails when the shipped models or the viewer's files are missing from the wheel.
#   bash scripts/check_wheel.sh            # prints the wheel's size in MB at the end
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip wheel -q --no-deps -w "$WORK/dist" . >/dev/null
WHEEL=$(ls "$WORK"/dist/prmsearch-*.whl)
"$PYTHON" - "$WHEEL" <<'EOF'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
needed = [f"prmsearch/arith/models/{m}/{f}" for m in ("policy", "prm")
          for f in ("config.json", "model.safetensors", "tokenizer.json")]
needed += [f"prmsearch/viewer/{f}" for f in ("template.html", "viewer.css", "viewer.js")] + ["prmsearch/py.typed"]
missing = [n for n in needed if n not in names]
if missing:
    sys.exit(f"the wheel lacks {missing}: check [tool.setuptools.package-data] in pyproject.toml")
EOF
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "torch==2.13.0" >/dev/null
"$WORK/venv/bin/python" -m pip install -q "$WHEEL[hf]" >/dev/null
cd "$WORK"
export HF_HUB_OFFLINE=1
"$WORK/venv/bin/python" -c "import prmsearch, sys; assert 'site-packages' in prmsearch.__file__, prmsearch.__file__"
"$WORK/venv/bin/prmsearch" solve "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?" --n 4
"$WORK/venv/bin/prmsearch" view --question "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?" \
    --out "$WORK/tree.html" >/dev/null
test -s "$WORK/tree.html"
echo "wheel ok: $(basename "$WHEEL"), $("$PYTHON" -c "import os, sys; print(round(os.path.getsize(sys.argv[1]) / 1e6, 1))" "$WHEEL") MB"
