#!/usr/bin/env bash
# Builds the DocC catalogs with the toolchain's docc into .build/docs/MODULE; any warning is an error.
#   bash Scripts/docs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
modules=(AppAttest AppAttestClient AppAttestStore AppAttestLifecycle AppAttestHTTP AppAttestHummingbird)
graphs="$(bash Scripts/symbol-graphs.sh)"
for module in "${modules[@]}"; do
    input="$(mktemp -d)"
    cp "$graphs/$module".symbols.json "$input/"
    cp "$graphs/$module"@*.symbols.json "$input/" 2>/dev/null || true
    rm -rf ".build/docs/$module" && mkdir -p .build/docs
    docc convert "Sources/$module/$module.docc" \
        --additional-symbol-graph-dir "$input" \
        --fallback-display-name "$module" --fallback-bundle-identifier "org.swift-app-attest.$module" \
        --output-path ".build/docs/$module" --warnings-as-errors >"$input/docc.log" 2>&1 || {
        cat "$input/docc.log"
        echo "docs: $module failed" >&2
        exit 1
    }
    if grep -q "warning:" "$input/docc.log"; then
        cat "$input/docc.log"
        echo "docs: $module has warnings" >&2
        exit 1
    fi
    echo "docs: $module → .build/docs/$module"
done
