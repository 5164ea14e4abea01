#!/usr/bin/env bash
# Load and fault test of `appattest serve` with wrk on 127.0.0.1 (README "Load"), SQLite and PostgreSQL.
#   Scripts/load.sh                 needs wrk (apt-get install wrk) and PostgreSQL (APPATTEST_POSTGRES_URL, or
#                                   .ci/postgres.sh starts a throwaway one)
# Environment: APPATTEST_BINARY (see below), DURATION (15s), CONNECTIONS (32), DEVICES (1000), ASSERTIONS (assertions
# per device and run, 300: a run that outlasts them has no ratio, and the script exits 1), TRACES (1: the servers
# export every span over OTLP/HTTP to a local sink, nginx, that accepts and drops them; 0 by default). The attestation
# budget is off: registering the devices is not what is measured.
# For each database: the trivial route /ping (the HTTP stack's ceiling), assertion verification, then the same with
# malformed, unauthenticated, replayed and oversized requests mixed in; after each run `appattest-dev load check`
# compares every key's stored counter with the highest counter the server accepted for it. Then a SQLite server with
# a reorder window of 64 (counterReorderWindow) takes each device's assertions eight at a time, shuffled and in
# flight together. Each assertion run is followed by another /ping run and its ratio to the mean of the /ping runs
# before and after it.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
DURATION="${DURATION:-15s}"
CONNECTIONS="${CONNECTIONS:-32}"
DEVICES="${DEVICES:-1000}"
ASSERTIONS="${ASSERTIONS:-300}"
THREADS=2
APP=LOADTEST01.com.example.load
TOKEN="load-test-token-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
MAX_BODY=131072

source Scripts/common.sh
TRACING=()
if [ "${TRACES:-0}" = 1 ]; then
    command -v nginx >/dev/null || { echo "TRACES=1 needs nginx (apt-get install nginx-light)" >&2; exit 1; }
    # A collector that accepts every export and keeps nothing: what tracing costs the servers, not a collector.
    start_nginx sink <<CONF
http {
    access_log off;
    client_body_temp_path $WORK/nginx;
    server { listen 127.0.0.1:14318; location / { client_max_body_size 64m; return 200; } }
}
CONF
    TRACING=(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:14318/v1/traces)
    echo "traces: every span exported to http://127.0.0.1:14318/v1/traces"
fi
serve() { # NAME DATABASE PORT [REORDER-WINDOW]
    env "${TRACING[@]}" \
    APPATTEST_APPS="$APP" APPATTEST_TESTING_ROOT="$WORK/root.pem" APPATTEST_TOKENS="load:$TOKEN" \
        APPATTEST_RATE_LIMIT=off APPATTEST_MAX_BODY_BYTES=$MAX_BODY APPATTEST_LOG_LEVEL=warning \
        APPATTEST_COUNTER_REORDER_WINDOW="${4:-1}" APPATTEST_ATTESTATIONS_PER_SECOND=0 \
        $A serve --database "$2" --port "$3" >"$WORK/$1.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$3/health" >/dev/null && return; sleep 0.1; done
    echo "the $1 server did not start:" >&2; cat "$WORK/$1.log" >&2; exit 1
}
serve sqlite "sqlite:$WORK/load.sqlite" 18080
serve postgres "$APPATTEST_POSTGRES_URL" 18081
serve window "sqlite:$WORK/window.sqlite" 18082 64
SQLITE=http://127.0.0.1:18080
POSTGRES=http://127.0.0.1:18081
WINDOW=http://127.0.0.1:18082

$D load prepare --dir "$WORK" --url $SQLITE --url $POSTGRES --url $WINDOW --token "$TOKEN" --app-id $APP \
    --devices "$DEVICES" --assertions "$ASSERTIONS" --runs 2 --grouped 8

wrk_run() { # URL MODE FILE: one wrk run, its RESULT, SENT and RECEIVED lines printed and kept in $WORK/last
    wrk -t$THREADS -c"$CONNECTIONS" -d"$DURATION" -s Scripts/load.lua "$1" -- "$2" "$3" "$TOKEN" "$WORK/accepted" \
        $MAX_BODY $THREADS | grep -E '^(RESULT|SENT|RECEIVED)' | tee "$WORK/last"
    sed -n 's/^RESULT .* rps=\([0-9]*\).*/\1/p' "$WORK/last" >"$WORK/rps"
}
# The ceiling moves by ±10 % from one run to the next on a shared machine: each assertion run is followed by another
# /ping run, and its ratio is to the mean of the /ping runs just before and just after it.
run() { # LABEL URL MODE FILE
    echo "== $1"
    wrk_run "$2" "$3" "$4"
    rps="$(cat "$WORK/rps")"
    if [ "$3" = ping ]; then
        PING="$rps"
        return
    fi
    exhausted=0
    grep -q 'exhausted=' "$WORK/last" && exhausted=1
    $D load check --url "$2" --token "$TOKEN" "$WORK/accepted"
    echo "-- /ping again (ceiling after the run)"
    wrk_run "$2" ping -
    after="$(cat "$WORK/rps")"
    if [ "$exhausted" = 1 ]; then
        # The prepared assertions ran out and the rest of the run was /ping: its rate says nothing.
        echo "ratio to /ping: none, the run outlasted its prepared assertions (raise ASSERTIONS)"
        FAILED=1
    else
        echo "ratio to /ping: $(awk -v a="$rps" -v b="$PING" -v c="$after" 'BEGIN { printf "%.2f", 2 * a / (b + c) }')" \
            "(/ping before $PING, after $after)"
    fi
    PING="$after"
}
run "sqlite: trivial route /ping (ceiling)" $SQLITE ping -
run "sqlite: assertion verification" $SQLITE assert "$WORK/run-1.txt"
run "sqlite: assertion verification with faults mixed in" $SQLITE faults "$WORK/run-2.txt"
run "postgres: trivial route /ping (ceiling)" $POSTGRES ping -
run "postgres: assertion verification" $POSTGRES assert "$WORK/run-1.txt"
run "postgres: assertion verification with faults mixed in" $POSTGRES faults "$WORK/run-2.txt"
run "sqlite, reorder window 64: trivial route /ping (ceiling)" $WINDOW ping -
run "sqlite, reorder window 64: 8 requests per device in flight, shuffled" $WINDOW assert "$WORK/run-grouped.txt"

echo "== after the runs"
for url in $SQLITE $POSTGRES $WINDOW; do
    echo "$url/health: $(curl -s "$url/health")"
    curl -s "$url/metrics" | grep -E '^appattest_(verifications|http_refusals)_total' | grep -v '"key"' | sort
done
# Graceful shutdown: SIGTERM, and both exit 0.
for pid in "${pids[@]}"; do kill -TERM "$pid"; done
for pid in "${pids[@]}"; do wait "$pid" && echo "server $pid stopped cleanly (exit 0)"; done
pids=()
exit "$FAILED"
