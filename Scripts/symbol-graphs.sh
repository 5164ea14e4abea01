#!/usr/bin/env bash
# Extracts the public symbol graphs of every module (all traits enabled) and prints the folder that holds them.
set -euo pipefail
cd "$(dirname "$0")/.."
swift package --enable-all-traits dump-symbol-graph --skip-synthesized-members >/dev/null
ls -d "$PWD"/.build/*/symbolgraph | head -n 1
