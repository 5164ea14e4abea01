#!/usr/bin/env bash
# Several instances of `appattest serve` on one PostgreSQL, behind nginx on 127.0.0.1 (README "Scale").
#   Scripts/fleet.sh                needs wrk, nginx (apt-get install wrk nginx-light) and PostgreSQL
#                                   (APPATTEST_POSTGRES_URL, or .ci/postgres.sh starts a throwaway one)
# Environment: APPATTEST_BINARY / APPATTEST_DEV_BINARY (as Scripts/load.sh), DURATION (10s), CONNECTIONS (32),
# DEVICES (1000), BUDGET (attestations per second of the budget phase, 20), FAILOVER (0 skips 4), FAILOVER_ONLY (1 runs
# only 4).
# 1. Two instances, one database, nginx dealing the requests out round-robin: every device's requests reach both
#    instances. /ping through nginx, the assertion run, `appattest-dev load check` (every counter answered 200 is
#    stored, none twice: LOST counter updates), /ping again. One line:
#      RESULT fleet=2 rps=R ratio=X p50=… p99=… rss_mib=A+B
# 2. A key revoked through one instance, its next assertion sent to the other at once: refused (the database's
#    conditional update is the authority; a cached key does not outlive its revocation). One line:
#      revocation: refused by the other instance after S s
# 3. The attestation budget: both instances with a budget of BUDGET a second, attestation challenges asked for
#    through nginx from 8 clients at once for 3 seconds. One line:
#      budget: issued N in S s (at most BUDGET × S + BUDGET), refused M with Retry-After
# The script exits 1 when a counter is lost, the revocation is not honoured or the budget is exceeded.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
DEVICES="${DEVICES:-1000}"
BUDGET="${BUDGET:-20}"
THREADS=2
APP=FLEETTEST1.com.example.fleet
TOKEN="fleet-test-token-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
source Scripts/common.sh

# nginx: one upstream per phase, with keep-alive connections to the instances.
start_nginx fleet <<CONF
http {
    access_log off;
    client_body_temp_path $WORK/nginx;
    proxy_temp_path $WORK/nginx;
    upstream fleet { server 127.0.0.1:18111; server 127.0.0.1:18112; keepalive 64; }
    upstream budget { server 127.0.0.1:18113; server 127.0.0.1:18114; keepalive 16; }
    server {
        listen 127.0.0.1:18110;
        location / { proxy_pass http://fleet; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
    server {
        listen 127.0.0.1:18115;
        location / { proxy_pass http://budget; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF

if [ "${FAILOVER_ONLY:-0}" != 1 ]; then
serve() { # NAME PORT BUDGET
    APPATTEST_APPS="$APP" APPATTEST_TESTING_ROOT="$WORK/root.pem" APPATTEST_TOKENS="fleet:$TOKEN" \
        APPATTEST_RATE_LIMIT=off APPATTEST_LOG_LEVEL=warning APPATTEST_ATTESTATIONS_PER_SECOND="$3" \
        APPATTEST_MAX_KEYS_PER_USER=0 $A serve --database "$APPATTEST_POSTGRES_URL" --port "$2" >"$WORK/$1.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$2/health" >/dev/null && return; sleep 0.1; done
    echo "the $1 server did not start:" >&2; cat "$WORK/$1.log" >&2; exit 1
}
serve first 18111 0
serve second 18112 0
FIRST=${pids[0]}
SECOND=${pids[1]}
FLEET=http://127.0.0.1:18110

# 1. Load through nginx.
$D load prepare --dir "$WORK" --url $FLEET --token "$TOKEN" --app-id $APP --devices "$DEVICES" --assertions 300 \
    --runs 2 | grep -v '^wrote' || true
wrk_run() { # MODE FILE
    wrk -t$THREADS -c"$CONNECTIONS" -d"$DURATION" -s Scripts/load.lua $FLEET -- "$1" "$2" "$TOKEN" \
        "$WORK/accepted" 131072 $THREADS | grep -E '^RESULT'
}
rps() { sed -n 's/.* rps=\([0-9]*\).*/\1/p'; }
before="$(wrk_run ping - | rps)"
result="$(wrk_run assert "$WORK/run-1.txt")"
echo "$result"
# A check that cannot read the counters back leaves `lost` empty: counted as a failure, not an exit.
check="$($D load check --url $FLEET --token "$TOKEN" "$WORK/accepted" 2>&1)" || true
echo "$check" | grep -E 'LOST|stored ahead' || true
lost="$(echo "$check" | sed -n 's/.*LOST counter updates: \([0-9]*\).*/\1/p')"
[ "${lost:-1}" = 0 ] || FAILED=1
after="$(wrk_run ping - | rps)"
rss() { awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
ratio="$(awk -v a="$(echo "$result" | rps)" -v b="$before" -v c="$after" 'BEGIN { printf "%.2f", 2 * a / (b + c) }')"
p50="$(echo "$result" | sed -n 's/.* \(p50=[^ ]*\).*/\1/p')"
p99="$(echo "$result" | sed -n 's/.* \(p99=[^ ]*\).*/\1/p')"
echo "RESULT fleet=2 rps=$(echo "$result" | rps) ratio=$ratio $p50 $p99 rss_mib=$(rss "$FIRST")+$(rss "$SECOND")" \
    "(/ping through nginx $before, $after)"

# 2. A revocation made through one instance, honoured by the other at once. Device 0's first assertion of the
# second prepared run is newer than any of the first run's.
line="$(grep -m1 -P '^0\t' "$WORK/run-2.txt" | cut -f2)"
key="$(echo "$line" | sed -n 's/.*"keyId":"\([^"]*\)".*/\1/p')"
encoded="$(printf '%s' "$key" | sed 's#/#%2F#g; s#+#%2B#g; s#=#%3D#g')"
start=$(date +%s.%N)
curl -sf -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"reason":"fleet.sh"}' "http://127.0.0.1:18111/v1/keys/$encoded/revoke" >/dev/null
answer="$(curl -s -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$line" \
    http://127.0.0.1:18112/v1/assertions/verify)"
elapsed="$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')"
if echo "$answer" | grep -q '"code":"keyRevoked"'; then
    echo "revocation: refused by the other instance after $elapsed s"
else
    echo "revocation: NOT honoured by the other instance: $answer"
    FAILED=1
fi

# 3. The budget, shared through the database by two more instances.
serve third 18113 "$BUDGET"
serve fourth 18114 "$BUDGET"
seq 1 100000 >"$WORK/numbers"
start=$(date +%s.%N)
timeout 3 xargs -a "$WORK/numbers" -P 8 -n 1 sh -c 'curl -s -o /dev/null -w "%{http_code}\n" -X POST \
    -H "Authorization: Bearer '"$TOKEN"'" -H "Content-Type: application/json" \
    -d "{\"purpose\":\"attestation\"}" http://127.0.0.1:18115/v1/challenges' >"$WORK/codes" 2>/dev/null || true
elapsed="$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')"
issued="$(grep -c '^200$' "$WORK/codes" || true)"
refused="$(grep -c '^429$' "$WORK/codes" || true)"
allowed="$(awk -v b="$BUDGET" -v s="$elapsed" 'BEGIN { printf "%d", b * s + b }')"
echo "budget: issued $issued in $elapsed s (at most $allowed), refused $refused with Retry-After"
if [ "$issued" -gt "$allowed" ] || [ "$refused" = 0 ]; then FAILED=1; fi
fi
[ "${FAILOVER:-1}" = 1 ] || exit $FAILED

# 4. A primary failover under load. A primary and a synchronous standby (synchronous_commit = remote_apply: a commit
# is acknowledged once the standby has applied it) on 127.0.0.1, and between them and the service a TCP proxy that
# sends connections to the primary, and to the standby only when the primary does not answer (nginx's stream
# module, apt-get install libnginx-mod-stream; in production: HAProxy with Patroni's primary check, PgBouncer behind
# a virtual IP, or your cloud's writer endpoint). Under load the primary is killed (SIGKILL) and, two seconds later,
# the standby promoted. Two probes every 100 ms, a read (the readiness check) and a write (a challenge issued),
# measure the unavailability; `load check` then reads every counter back from the promoted database.
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
stream=/usr/lib/nginx/modules/ngx_stream_module.so
[ -f "$stream" ] || { echo "failover: needs nginx's stream module (apt-get install libnginx-mod-stream)" >&2; exit 1; }
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# Below Linux's range of ephemeral ports (32768–60999): a port in it can be the local end of any connection made
# earlier in the run (the instances' to PostgreSQL, nginx's to the instances), and binding it then fails.
P1=25441
P2=25442
PROXY=25440
chmod a+x "$WORK"
mkdir -p "$WORK/primary" "$WORK/standby"
if [ "$(id -u)" -eq 0 ]; then chown postgres "$WORK/primary" "$WORK/standby"; fi
chmod 700 "$WORK/primary" "$WORK/standby"
as_postgres "$bin/initdb" -D "$WORK/primary" --auth=trust --username=postgres -E UTF8 >/dev/null
stop_clusters() {
    as_postgres "$bin/pg_ctl" -D "$WORK/standby" -m immediate stop >/dev/null 2>&1 || true
    as_postgres "$bin/pg_ctl" -D "$WORK/primary" -m immediate stop >/dev/null 2>&1 || true
}
stop_at_exit+=(stop_clusters)
start_cluster() { # NAME PORT
    as_postgres "$bin/pg_ctl" -D "$WORK/$1" -l "$WORK/$1/server.log" -w -o "-p $2 $settings" start >/dev/null \
        || { echo "failover: the $1 did not start:" >&2; tail -n 20 "$WORK/$1/server.log" >&2; exit 1; }
}
settings="-c listen_addresses=127.0.0.1 -k /tmp -c max_connections=200 -c fsync=on -c wal_level=replica \
    -c max_wal_senders=4 -c hot_standby=on -c synchronous_commit=remote_apply"
start_cluster primary $P1
as_postgres "$bin/createdb" -h 127.0.0.1 -p $P1 -U postgres appattest
as_postgres "$bin/pg_basebackup" -h 127.0.0.1 -p $P1 -U postgres -D "$WORK/standby" -X stream -R
echo "primary_conninfo = 'host=127.0.0.1 port=$P1 user=postgres application_name=standby1'" \
    | as_postgres tee -a "$WORK/standby/postgresql.auto.conf" >/dev/null
start_cluster standby $P2
# Synchronous once the standby runs (before, every commit would wait for it).
as_postgres "$bin/psql" -h 127.0.0.1 -p $P1 -U postgres -qc "ALTER SYSTEM SET synchronous_standby_names = 'standby1'"
as_postgres "$bin/psql" -h 127.0.0.1 -p $P1 -U postgres -qtAc "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 100); do
    state="$(as_postgres "$bin/psql" -h 127.0.0.1 -p $P1 -U postgres -tAc \
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'")"
    [ "$state" = sync ] && break
    sleep 0.1
done
[ "$state" = sync ] || { echo "failover: the standby is not synchronous ($state)" >&2; exit 1; }
start_nginx proxy "load_module $stream;" <<CONF
stream {
    upstream postgres { server 127.0.0.1:$P1 max_fails=1 fail_timeout=60s; server 127.0.0.1:$P2 backup; }
    server { listen 127.0.0.1:$PROXY; proxy_pass postgres; proxy_connect_timeout 1s; }
}
CONF
APPATTEST_APPS="$APP" APPATTEST_TESTING_ROOT="$WORK/root.pem" APPATTEST_TOKENS="fleet:$TOKEN" \
    APPATTEST_RATE_LIMIT=off APPATTEST_LOG_LEVEL=warning APPATTEST_ATTESTATIONS_PER_SECOND=0 \
    APPATTEST_MAX_KEYS_PER_USER=0 $A serve --database "postgres://postgres@127.0.0.1:$PROXY/appattest" \
    --port 18116 >"$WORK/failover.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf http://127.0.0.1:18116/health >/dev/null && break; sleep 0.1; done
$D load prepare --dir "$WORK" --url http://127.0.0.1:18116 --token "$TOKEN" --app-id $APP \
    --devices "$DEVICES" --assertions 300 --runs 1 | grep -v '^wrote' || true
# Two probes every 100 ms: a read (the readiness check) and a write (an attestation challenge issued, a row inserted).
( while :; do
    printf '%s %s %s\n' "$(date +%s.%N)" "$(curl -s -o /dev/null -m 5 -w '%{http_code}' \
        http://127.0.0.1:18116/health/ready)" "$(curl -s -o /dev/null -m 5 -w '%{http_code}' -X POST \
        -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -d '{"purpose":"attestation"}' \
        http://127.0.0.1:18116/v1/challenges)"
    sleep 0.1
  done ) >"$WORK/probe" &
PROBE=$!
pids+=("$PROBE")
wrk -t$THREADS -c"$CONNECTIONS" -d20s --timeout 10s -s Scripts/load.lua http://127.0.0.1:18116 -- assert \
    "$WORK/run-1.txt" "$TOKEN" "$WORK/failover-accepted" 131072 $THREADS >"$WORK/failover-wrk" &
load=$!
pids+=("$load")
sleep 6
kill -KILL "$(head -n 1 "$WORK/primary/postmaster.pid")"
killed=$(date +%s.%N)
sleep 2
as_postgres "$bin/pg_ctl" -D "$WORK/standby" -w promote >/dev/null
promoted=$(date +%s.%N)
wait $load
kill $PROBE 2>/dev/null || true
grep -E '^(RESULT|RECEIVED)' "$WORK/failover-wrk"
check="$($D load check --url http://127.0.0.1:18116 --token "$TOKEN" "$WORK/failover-accepted" 2>&1)" || true
echo "$check" | grep -E 'LOST|Error' || true
lost="$(echo "$check" | sed -n 's/.*LOST counter updates: \([0-9]*\).*/\1/p')"
# From the first failed probe after the kill to the last (reads and writes apart; reads also work on the standby).
span() { # COLUMN
    awk -v k="$killed" -v c="$1" '$1 >= k && $c != 200 { if (!first) first = $1; last = $1 }
        END { if (first) printf "%.1f", last - first + 0.1; else printf "0" }' "$WORK/probe"
}
unavailable="$(span 3)"
# The first write accepted after the promotion.
resumed="$(awk -v p="$promoted" '$1 >= p && $3 == 200 { printf "%.1f", $1 - p; exit }' "$WORK/probe")"
unreadable="$(span 2)"
recovered=""
if [ "$(tail -n 1 "$WORK/probe" | cut -d' ' -f2,3)" != "200 200" ]; then
    recovered=" (not recovered by the end of the run)"
    FAILED=1
fi
echo "failover: unavailable $unavailable s (writes, ${resumed:-never} s after the promotion; reads $unreadable s)$recovered, acknowledged lost ${lost:-unknown}"
[ "${lost:-1}" = 0 ] || FAILED=1
if grep -E '^RECEIVED' "$WORK/failover-wrk" | grep -qE ' 5(00|02|04)='; then
    echo "failover: a request was answered 500, 502 or 504"
    FAILED=1
fi
if ! grep -q 'socket_errors=0 ' "$WORK/failover-wrk"; then
    echo "failover: a request went unanswered (wrk's timeout, 10 s, or a closed connection)"
    FAILED=1
fi
exit $FAILED
