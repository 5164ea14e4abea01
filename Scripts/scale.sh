#!/usr/bin/env bash
# Cost as the fleet grows (README "Scale"): `appattest serve` on SQLite and on PostgreSQL with 1,000 and 100,000
# registered keys (and 1,000,000 with --million), wrk on 127.0.0.1 sending assertions round-robin over every key, so
# that with many keys nearly every request misses the key cache, as in a real fleet.
#   Scripts/scale.sh [--million]     needs wrk and PostgreSQL (APPATTEST_POSTGRES_URL, or .ci/postgres.sh starts one)
# Environment: APPATTEST_BINARY / APPATTEST_DEV_BINARY (as Scripts/load.sh), DURATION (15s), CONNECTIONS (32),
# SIZES (keys per run, "1000 100000"; --million adds 1000000), CACHE (keyCacheSize, 10000), ASSERTIONS (prepared per
# size, spread over every key, 300000), DATABASES ("sqlite postgres"), ROUNDS (3), RECEIPT_BYTES (each seeded key's
# receipt, 3800: the size of a real one, which makes a key's row about a page), REGISTER (seed: the keys are inserted
# as registration stores them, `appattest-dev load prepare --seed`, once per size and database, and every run starts
# from a copy; serve: each run's devices attest through its server, about 700 a second here, 25 minutes for a
# million, with the simulator's placeholder receipts).
# Each round runs every size and database in turn (so that the machine's drift falls on each alike): a fresh
# database, the server, a /ping run, the assertion run, `load check` (every accepted counter stored), another /ping
# run. One line per run:
#   RESULT keys=N db=D round=K rps=R ratio=X p50=… p99=… rss_mib=M cpu_us=C db_cpu_us=G idle=I%
# ratio is the assertion rate over the mean of the /ping runs around it; rss_mib the server's resident memory after
# the run; cpu_us the server's CPU time (user and system, from /proc) per request of the assertion run, not the
# database's (less moved by the machine's drift than the rates, when builds are compared); db_cpu_us PostgreSQL's
# (every process named postgres on the machine; 0 for SQLite, which runs in the server); idle the share of the two
# cores left idle in the middle half of the run (wrk keeps CONNECTIONS requests in flight, so a run bound by the round
# trips' latency leaves the cores partly idle: its rate is CONNECTIONS over the time a request takes, not the CPU's
# limit). Then per database and size
# the medians over the rounds, as multiples of the smallest size's:
#   MEDIAN db=D keys=N rounds=K rps=R ratio=X p99=… cpu_us=C db_cpu_us=G (A x and B x the 1000-key run; its rate Q x)
# (Q, the rates' multiple without the /ping runs, for reading the ratio's: a /ping run moves by 10–15 % from the next.)
# The script exits 1 when a counter is lost or an assertion refused. On PostgreSQL it creates and drops databases
# (appattest_scale_seed_N, appattest_scale_run) beside the one of APPATTEST_POSTGRES_URL: its user needs CREATEDB.
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
ROUNDS="${ROUNDS:-3}"
RECEIPT_BYTES="${RECEIPT_BYTES:-3800}"
case "$REGISTER" in seed | serve) ;; *) echo "REGISTER is seed or serve" >&2; exit 2 ;; esac
case "$ROUNDS" in "" | *[!0-9]* | 0*) echo "ROUNDS is a whole number from 1" >&2; exit 2 ;; esac
if [ "${1:-}" = --million ]; then SIZES="$SIZES 1000000"; fi
THREADS=2
APP=SCALETEST1.com.example.scale
TOKEN="scale-test-token-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
source Scripts/common.sh
PORT=18090
URL=http://127.0.0.1:$PORT

wrk_run() { # MODE FILE: prints the RESULT line and what was sent (SENT)
    wrk -t$THREADS -c"$CONNECTIONS" -d"$DURATION" -s Scripts/load.lua "$URL" -- "$1" "$2" "$TOKEN" "$WORK/accepted" \
        131072 $THREADS | grep -E '^(RESULT|SENT)'
}
rps() { sed -n 's/.* rps=\([0-9]*\).*/\1/p'; }
# PID [reaped]: user and system time, in clock ticks, with the children it has reaped when the second is given.
cpu_ticks() { awk -v reaped="${2:-}" '{ print $14 + $15 + (reaped != "" ? $16 + $17 : 0) }' "/proc/$1/stat"; }
# DB: the database server's user and system time, in clock ticks: every process named postgres (its backends, the
# writers and the log) with the children each has reaped (the postmaster's: backends and autovacuum workers that ended
# during the run), 0 for SQLite (in the server's own), - when no postgres process runs here (a remote server).
db_cpu_ticks() {
    local total=0 pid ticks found=""
    if [ "$1" = postgres ]; then
        for pid in $(pgrep -x postgres); do
            ticks="$(cpu_ticks "$pid" reaped 2>/dev/null)"
            total=$((total + ${ticks:-0}))
            found=1
        done
        [ -n "$found" ] || total=-
    fi
    echo "$total"
}
# TICKS_BEFORE TICKS_AFTER REQUESTS: the CPU between the two, in microseconds per request (- when either is unknown).
per_request() {
    awk -v t0="$1" -v t1="$2" -v hz="$(getconf CLK_TCK)" -v n="$3" \
        'BEGIN { if (n > 0 && t0 != "-" && t1 != "-") printf "%.0f", (t1 - t0) / hz * 1e6 / n; else print "-" }'
}
# The run's length in seconds, from DURATION as wrk takes it (10s, 2m, 1h, in either case, or seconds).
duration_seconds() {
    echo "$DURATION" | awk '{
        d = tolower($0); unit = substr(d, length(d)); n = d + 0
        print (unit == "m") ? n * 60 : (unit == "h") ? n * 3600 : n
    }'
}
# FILE: the share of both cores left idle (idle and I/O wait, from /proc/stat) over the middle half of a run that starts
# now, written to FILE: a run bound by the round trips' latency rather than by the CPU leaves the cores partly idle.
# (The window starts with wrk, before its script has read the prepared requests: a little early.)
idle_share() {
    local quarter s0 s1
    quarter="$(awk -v d="$(duration_seconds)" 'BEGIN { printf "%.2f", d / 4 }')"
    sleep "$quarter"
    s0="$(head -n 1 /proc/stat)"
    sleep "$(awk -v q="$quarter" 'BEGIN { print 2 * q }')"
    s1="$(head -n 1 /proc/stat)"
    echo "$s0 $s1" | awk '{
        # user … steal (guest time is already in user and nice)
        t0 = 0; for (i = 2; i <= 9; i++) t0 += $i
        t1 = 0; for (i = 13; i <= 20; i++) t1 += $i
        if (t1 > t0) printf "%.0f%%", 100 * (($16 + $17) - ($5 + $6)) / (t1 - t0); else print "-"
    }' >"$1"
}

# A database on the PostgreSQL server of APPATTEST_POSTGRES_URL, by name, as a URL (the URL's query kept).
pg_url() { # NAME
    local base="${APPATTEST_POSTGRES_URL%%\?*}" query=""
    case "$APPATTEST_POSTGRES_URL" in *\?*) query="?${APPATTEST_POSTGRES_URL#*\?}" ;; esac
    # postgres://host:port/database, or postgres://host:port without one.
    case "${base#*://}" in */*) base="${base%/*}" ;; esac
    echo "$base/$1$query"
}
psql_admin() { # SQL [URL]
    PGOPTIONS="-c client_min_messages=warning" psql -X "${2:-$APPATTEST_POSTGRES_URL}" -qtAc "$1" >/dev/null
}
drop_databases() {
    for size in $SIZES; do psql_admin "DROP DATABASE IF EXISTS appattest_scale_seed_$size WITH (FORCE)"; done
    psql_admin "DROP DATABASE IF EXISTS appattest_scale_run WITH (FORCE)"
}
case " $DATABASES " in *" postgres "*) stop_at_exit+=(drop_databases) ;; esac

# `appattest-dev load prepare` for SIZE devices (the rest of its arguments: where they are registered), its summary
# printed, and their assertions written to run-SIZE.txt.
prepare() { # SIZE ARGUMENTS…
    local size="$1"
    shift
    $D load prepare --dir "$WORK" "$@" --app-id $APP --devices "$size" \
        --assertions $(( (ASSERTIONS + size - 1) / size )) --runs 1 >"$WORK/prepare.log"
    sed "s/^/keys=$size: /" "$WORK/prepare.log" | grep -v ': wrote' || true
    # At most ASSERTIONS requests in the file (a million keys prepare one each, a million lines): wrk's Lua holds
    # every line, and with a million its collector paused the client for tens of milliseconds (p99 49 ms against
    # nginx answering at once, 4 ms with 300,000 lines), which showed as the server's p99. The first lines are as
    # many distinct keys, spread over the whole table (keyIds are hashes): every request still misses the cache.
    head -n "$ASSERTIONS" "$WORK/run-1.txt" >"$WORK/run-$size.txt"
    rm -f "$WORK/run-1.txt"
}

# Each size's devices: with REGISTER=seed, prepared once, their keys inserted into one seed per database and their
# assertions written once (run-SIZE.txt); every run starts from a copy of its seed.
if [ "$REGISTER" = seed ]; then
    for size in $SIZES; do
        seeds=()
        for db in $DATABASES; do
            if [ "$db" = sqlite ]; then
                seeds+=(--seed "sqlite:$WORK/seed-$size.sqlite")
            else
                psql_admin "DROP DATABASE IF EXISTS appattest_scale_seed_$size WITH (FORCE)"
                psql_admin "CREATE DATABASE appattest_scale_seed_$size"
                seeds+=(--seed "$(pg_url "appattest_scale_seed_$size")")
            fi
        done
        prepare "$size" "${seeds[@]}" --receipt-bytes "$RECEIPT_BYTES"
        # Each copy as a long-running database would be: hint bits set, statistics taken, nothing left for autovacuum
        # to start on in the middle of a run.
        case " $DATABASES " in
        *" postgres "*) psql_admin "VACUUM (FREEZE, ANALYZE)" "$(pg_url "appattest_scale_seed_$size")" ;;
        esac
    done
    # The seeded files on disk before the runs, as a running service's are: not the kernel's writeback of them.
    sync
fi

# One run: a fresh database (a copy of the seed, or empty for REGISTER=serve), the server, a /ping run, the assertion
# run, `load check`, another /ping run, and its RESULT line.
run() { # SIZE DB ROUND
    local size="$1" db="$2" round="$3" database
    if [ "$db" = sqlite ]; then
        database="sqlite:$WORK/run.sqlite"
        rm -f "$WORK"/run.sqlite*
        if [ "$REGISTER" = seed ]; then
            cp "$WORK/seed-$size.sqlite" "$WORK/run.sqlite"
            if [ -f "$WORK/seed-$size.sqlite-wal" ]; then cp "$WORK/seed-$size.sqlite-wal" "$WORK/run.sqlite-wal"; fi
            sync
        fi
    else
        database="$(pg_url appattest_scale_run)"
        psql_admin "DROP DATABASE IF EXISTS appattest_scale_run WITH (FORCE)"
        if [ "$REGISTER" = seed ]; then
            # Copied file by file, not written again through the log.
            psql_admin "CREATE DATABASE appattest_scale_run TEMPLATE appattest_scale_seed_$size STRATEGY FILE_COPY"
        else
            psql_admin "CREATE DATABASE appattest_scale_run"
        fi
    fi
    APPATTEST_APPS="$APP" APPATTEST_TESTING_ROOT="$WORK/root.pem" APPATTEST_TOKENS="scale:$TOKEN" \
        APPATTEST_RATE_LIMIT=off APPATTEST_LOG_LEVEL=warning APPATTEST_ATTESTATIONS_PER_SECOND=0 \
        APPATTEST_KEY_CACHE_SIZE="$CACHE" APPATTEST_MAX_KEYS_PER_USER=0 \
        $A serve --database "$database" --port $PORT >"$WORK/serve-$db-$size-$round.log" 2>&1 &
    SERVER=$!
    pids+=("$SERVER")
    for _ in $(seq 100); do curl -sf "$URL/health" >/dev/null && break; sleep 0.1; done
    if [ "$REGISTER" = serve ]; then prepare "$size" --url "$URL" --token "$TOKEN"; fi
    local before result lost after rss ratio p50 p99 refused exhausted ticks db_ticks cpu db_cpu requests sampler idle
    before="$(wrk_run ping - | rps)"
    ticks="$(cpu_ticks "$SERVER")"
    db_ticks="$(db_cpu_ticks "$db")"
    rm -f "$WORK/idle"
    idle_share "$WORK/idle" &
    sampler=$!
    pids+=("$sampler")
    result="$(wrk_run assert "$WORK/run-$size.txt")"
    wait "$sampler" || true
    idle="$(cat "$WORK/idle" 2>/dev/null || echo -)"
    requests="$(echo "$result" | sed -n 's/.* requests=\([0-9]*\).*/\1/p')"
    cpu="$(per_request "$ticks" "$(cpu_ticks "$SERVER")" "$requests")"
    db_cpu="$(per_request "$db_ticks" "$(db_cpu_ticks "$db")" "$requests")"
    lost="$($D load check --url "$URL" --token "$TOKEN" "$WORK/accepted" | grep -o 'LOST counter updates: [0-9]*')"
    after="$(wrk_run ping - | rps)"
    rss="$(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' /proc/$SERVER/status)"
    ratio="$(awk -v a="$(echo "$result" | rps)" -v b="$before" -v c="$after" 'BEGIN { printf "%.3f", 2 * a / (b + c) }')"
    p50="$(echo "$result" | sed -n 's/.* \(p50=[^ ]*\).*/\1/p')"
    p99="$(echo "$result" | sed -n 's/.* \(p99=[^ ]*\).*/\1/p')"
    echo "RESULT keys=$size db=$db round=$round rps=$(echo "$result" | rps) ratio=$ratio $p50 $p99 rss_mib=$rss cpu_us=$cpu db_cpu_us=$db_cpu idle=$idle (/ping $before, $after)" \
        | tee -a "$WORK/results"
    echo "$lost"
    [ "$lost" = "LOST counter updates: 0" ] || FAILED=1
    # A refused assertion is cheap: a run whose requests were refused would show a rate that means nothing.
    # Past the prepared assertions load.lua sends /ping: such a run's rate is not the assertions' alone.
    exhausted="$(echo "$result" | sed -n 's/.*exhausted=\([0-9]*\).*/\1/p')"
    if [ "${exhausted:-0}" != 0 ]; then
        echo "note: the prepared assertions ran out: $exhausted of the run's requests were /ping (raise ASSERTIONS)"
    fi
    refused="$(echo "$result" | sed -n 's/.* non2xx=\([0-9]*\).*/\1/p')"
    if [ "$refused" != 0 ]; then echo "refused assertions: ${refused:-unknown}"; FAILED=1; fi
    kill -TERM "$SERVER"
    wait "$SERVER" || true
    # Gone: not killed again at exit (its pid may be another process's by then).
    local pid kept=()
    for pid in "${pids[@]}"; do [ "$pid" = "$SERVER" ] || [ "$pid" = "$sampler" ] || kept+=("$pid"); done
    pids=("${kept[@]}")
    SERVER=""
}

# Round by round, every size in turn, so that the machine's drift (10–25 % within minutes) falls on every size alike.
for round in $(seq "$ROUNDS"); do
    for size in $SIZES; do
        for db in $DATABASES; do run "$size" "$db" "$round"; done
    done
done

# Per database and size, the median of the rounds' ratios and p99s (of two rounds, their mean), and each as a multiple
# of the smallest size's.
awk '
    /^RESULT/ {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        k = v["db"] " " v["keys"]; n[k]++; r[k, n[k]] = v["ratio"]; p[k, n[k]] = v["p99"] + 0; c[k, n[k]] = v["cpu_us"] + 0
        g[k, n[k]] = v["db_cpu_us"] + 0; if (v["db_cpu_us"] == "-") unknown[k] = 1
        q[k, n[k]] = v["rps"] + 0
        if (!(v["db"] in seen)) { seen[v["db"]] = 1; dbs[++d] = v["db"] }
        if (!(v["keys"] in sized)) { sized[v["keys"]] = 1; sizes[++s] = v["keys"] }
        if (first == "" || v["keys"] + 0 < first + 0) first = v["keys"]
    }
    function median(a, k, count,    i, j, t, x) {
        for (i = 1; i <= count; i++) x[i] = a[k, i]
        for (i = 2; i <= count; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
        return count % 2 ? x[(count + 1) / 2] : (x[count / 2] + x[count / 2 + 1]) / 2
    }
    END {
        for (i = 1; i <= d; i++) for (j = 1; j <= s; j++) {
            k = dbs[i] " " sizes[j]; if (!n[k]) continue
            mr = median(r, k, n[k]); mp = median(p, k, n[k]); mc = median(c, k, n[k]); mq = median(q, k, n[k]); mg = median(g, k, n[k])
            base = dbs[i] " " first
            line = sprintf("MEDIAN db=%s keys=%s rounds=%d rps=%.0f ratio=%.3f p99=%.2fms cpu_us=%.0f db_cpu_us=%s", dbs[i], sizes[j], n[k], mq, mr, mp, mc, (k in unknown) ? "-" : sprintf("%.0f", mg))
            if (sizes[j] != first && n[base]) {
                br = median(r, base, n[base]); bp = median(p, base, n[base]); bq = median(q, base, n[base])
                if (br > 0 && bp > 0) {
                    line = line sprintf(" (%.3f x and %.2f x the %s-key run", mr / br, mp / bp, first)
                    if (bq > 0) line = line sprintf("; its rate %.3f x", mq / bq)
                    line = line ")"
                }
            }
            print line
        }
    }' "$WORK/results"
exit $FAILED
