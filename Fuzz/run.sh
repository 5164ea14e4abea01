#!/usr/bin/env bash
# Fuzzes one entry point of the library with libFuzzer for a given time.
#   Fuzz/run.sh ENTRY SECONDS      ENTRY: cbor | authdata | attestation | assertion
# Builds appattest-fuzz with -sanitize=fuzzer,address into .build-fuzz/, seeds a corpus from TestVectors/, runs,
# and leaves crashes in fuzz-out/ENTRY/ (replay one with: swift run appattest-fuzz ENTRY FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
entry="${1:?entry: cbor|authdata|attestation|assertion}"
seconds="${2:-600}"
swift build -c release --scratch-path .build-fuzz --product appattest-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -D -Xswiftc FUZZING >&2
binary=".build-fuzz/release/appattest-fuzz"
corpus="fuzz-out/$entry/corpus"
mkdir -p "$corpus" "fuzz-out/$entry/crashes"
python3 Fuzz/make-corpus.py "$entry" "$corpus" >&2
FUZZ_ENTRY="$entry" "$binary" "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -timeout=10 -artifact_prefix="fuzz-out/$entry/crashes/" -print_final_stats=1
