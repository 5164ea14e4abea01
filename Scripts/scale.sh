#!/usr/bin/env bash
# Cost as the fleet grows (README "Scale"): `appattest serve` on SQLite and on PostgreSQL with 1,000 and 100,000
# registered keys (and 1,000,000 with --million), wrk on 127.0.0.1 sending assertions round-robin over every key, so
# that with many keys nearly every request misses the key cache, as in a real fleet.
#   Scripts/scale.sh [--million]     needs wrk and PostgreSQL (APPATTEST_POSTGRES_URL, or .ci/postgres.sh starts one)
# Environment: APPATTEST_BINARY / APPATTEST_DEV_BINARY (as Scripts/load.sh), DURATION (15s), CONNECTIONS (32),
# SIZES (keys per run, "1000 100000"; --million adds 1000000), CACHE (keyCacheSize, 10000), ASSERTIONS (prepared per
# run, spread over every key, 300000), DATABASES ("sqlite postgres"), REGISTER (seed: the keys are inserted into the
# fresh store as registration stores them, `appattest-dev load prepare --seed`, before the server starts; serve: each
# device attests through the server, about 700 a second here, 25 minutes for a million).
# For each size and database: a fresh database, the keys registered, a /ping run, the assertion run, `load check`
# (every accepted counter stored), another /ping run. One line per run:
#   RESULT keys=N db=D rps=R ratio=X p50=… p99=… rss_mib=M
# ratio is the assertion rate over the mean of the /ping runs around it; rss_mib the server's resident memory after
# the run. The script exits 1 when a counter is lost.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
DURATION="${DURATION:-15s}"
CONNECTIONS="${CONNECTIONS:-32}"
SIZES="${SIZES:-1000 100000}"
CACHE="${CACHE:-10000}"
ASSERTIONS="${ASSERTIONS:-300000}"
DATABASES="${DATABASES:-sqlite postgres}"
REGISTER="${REGISTER:-seed}"
case "$REGISTER" in seed | serve) ;; *) echo "REGISTER is seed or serve" >&2; exit 2 ;; esac
if [ "${1:-}" = --million ]; then SIZES="$SIZES 1000000"; fi
THREADS=2
APP=SCALETEST1.com.example.scale
TOKEN="scale-test-token-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
source Scripts/common.sh
PORT=18090
URL=http://127.0.0.1:$PORT

wrk_run() { # MODE FILE: prints the RESULT line
    wrk -t$THREADS -c"$CONNECTIONS" -d"$DURATION" -s Scripts/load.lua "$URL" -- "$1" "$2" "$TOKEN" "$WORK/accepted" \
        131072 $THREADS | grep -E '^RESULT'
}
rps() { sed -n 's/.* rps=\([0-9]*\).*/\1/p'; }

for size in $SIZES; do
    for db in $DATABASES; do
        if [ "$db" = sqlite ]; then
            database="sqlite:$WORK/scale-$size.sqlite"
        else
            # A schema of its own for each run: a fresh table of keys.
            psql_url="$APPATTEST_POSTGRES_URL"
            database="$psql_url"
            psql "$psql_url" -qc "DROP TABLE IF EXISTS app_attest_keys, app_attest_challenges, app_attest_schema, \
                app_attest_key_events, app_attest_token_buckets CASCADE" >/dev/null
        fi
        # Enough assertions for a run at any rate seen here (about 10,000 a second at most), spread over every key.
        per=$(( (ASSERTIONS + size - 1) / size ))
        if [ "$REGISTER" = seed ]; then
            # The keys inserted as registration stores them, before the server opens the store.
            $D load prepare --dir "$WORK" --seed "$database" --app-id $APP --devices "$size" \
                --assertions "$per" --runs 1 >"$WORK/prepare.log"
            grep -v '^wrote' "$WORK/prepare.log" || true
            # The seeded file on disk before the run, as a running service's is: not the kernel's writeback of it.
            sync
        fi
        APPATTEST_APPS="$APP" APPATTEST_TESTING_ROOT="$WORK/root.pem" APPATTEST_TOKENS="scale:$TOKEN" \
            APPATTEST_RATE_LIMIT=off APPATTEST_LOG_LEVEL=warning APPATTEST_ATTESTATIONS_PER_SECOND=0 \
            APPATTEST_KEY_CACHE_SIZE="$CACHE" APPATTEST_MAX_KEYS_PER_USER=0 \
            $A serve --database "$database" --port $PORT >"$WORK/serve-$db-$size.log" 2>&1 &
        SERVER=$!
        pids+=("$SERVER")
        for _ in $(seq 100); do curl -sf "$URL/health" >/dev/null && break; sleep 0.1; done
        if [ "$REGISTER" = serve ]; then
            $D load prepare --dir "$WORK" --url "$URL" --token "$TOKEN" --app-id $APP --devices "$size" \
                --assertions "$per" --runs 1 >"$WORK/prepare.log"
            grep -v '^wrote' "$WORK/prepare.log" || true
        fi
        # At most ASSERTIONS requests in the file (a million keys prepare one each, a million lines): wrk's Lua holds
        # every line, and with a million its collector paused the client for tens of milliseconds (p99 49 ms against
        # nginx answering at once, 4 ms with 300,000 lines), which showed as the server's p99. The first lines are as
        # many distinct keys, spread over the whole table (keyIds are hashes): every request still misses the cache.
        head -n "$ASSERTIONS" "$WORK/run-1.txt" >"$WORK/run-1.head"
        mv "$WORK/run-1.head" "$WORK/run-1.txt"
        before="$(wrk_run ping - | rps)"
        result="$(wrk_run assert "$WORK/run-1.txt")"
        lost="$($D load check --url "$URL" --token "$TOKEN" "$WORK/accepted" | grep -o 'LOST counter updates: [0-9]*')"
        after="$(wrk_run ping - | rps)"
        rss="$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' /proc/$SERVER/status)"
        ratio="$(awk -v a="$(echo "$result" | rps)" -v b="$before" -v c="$after" 'BEGIN { printf "%.2f", 2 * a / (b + c) }')"
        p50="$(echo "$result" | sed -n 's/.* \(p50=[^ ]*\).*/\1/p')"
        p99="$(echo "$result" | sed -n 's/.* \(p99=[^ ]*\).*/\1/p')"
        echo "RESULT keys=$size db=$db rps=$(echo "$result" | rps) ratio=$ratio $p50 $p99 rss_mib=$rss (/ping $before, $after)"
        echo "$lost"
        [ "$lost" = "LOST counter updates: 0" ] || FAILED=1
        # A refused assertion is cheap: a run whose requests were refused would show a rate that means nothing.
        refused="$(echo "$result" | sed -n 's/.* non2xx=\([0-9]*\).*/\1/p')"
        if [ "$refused" != 0 ]; then echo "refused assertions: ${refused:-unknown}"; FAILED=1; fi
        kill -TERM "$SERVER"
        wait "$SERVER" || true
        SERVER=""
        rm -f "$WORK"/run-1.txt "$WORK"/scale-*.sqlite*
    done
done
exit $FAILED
