#!/usr/bin/env bash
# The public API of every product module, one declaration a line, compared with the committed api/MODULE.txt.
#   bash Scripts/api.sh            fails and prints the difference when the public API changed
#   bash Scripts/api.sh --update   rewrites api/ (commit it, so that the change is visible in review)
set -euo pipefail
cd "$(dirname "$0")/.."
modules=(AppAttest AppAttestClient AppAttestClientMiddleware AppAttestVectors AppAttestTesting AppAttestStore AppAttestLifecycle AppAttestHTTP AppAttestSQLite AppAttestPostgres
    AppAttestHummingbird AppAttestVapor AppAttestServiceClient AppleDeviceAPI AppleDeviceAPITesting)
graphs="$(bash Scripts/symbol-graphs.sh)"
current="$(mktemp -d)"
for module in "${modules[@]}"; do
    python3 - "$graphs" "$module" >"$current/$module.txt" <<'PY'
import glob, json, sys
graphs, module = sys.argv[1], sys.argv[2]
lines = set()
for path in [f"{graphs}/{module}.symbols.json"] + glob.glob(f"{graphs}/{module}@*.symbols.json"):
    for symbol in json.load(open(path))["symbols"]:
        if symbol["accessLevel"] not in ("public", "open"):
            continue
        where = ".".join(symbol["pathComponents"][:-1])
        declaration = "".join(f["spelling"] for f in symbol.get("declarationFragments", []))
        text = f"{where}: {declaration}" if where else declaration
        lines.add(" ".join(text.split()))
print("\n".join(sorted(lines)))
PY
done
if [ "${1:-}" = "--update" ]; then
    rm -rf api && mkdir api && cp "$current"/*.txt api/
    echo "api: updated api/"
    exit 0
fi
if ! diff -ru api "$current"; then
    echo "api: the public API differs from api/ (bash Scripts/api.sh --update, and commit it if intended)" >&2
    exit 1
fi
echo "api: unchanged ($(cat api/*.txt | wc -l) public declarations)"
