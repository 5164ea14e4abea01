#!/usr/bin/env bash
# Starts or stops a throwaway PostgreSQL for the tests, on 127.0.0.1 only, trust authentication.
#   .ci/postgres.sh start    prints the URL to export as APPATTEST_POSTGRES_URL
#   .ci/postgres.sh stop
# TLS is on too (plain connections still work): a throwaway CA signs a certificate for localhost and 127.0.0.1;
# the CA is written beside the data folder as postgres-ca.crt (export it as APPATTEST_POSTGRES_CA for the TLS tests).
set -euo pipefail
# Below the ephemeral ports (32768–60999), which any earlier outgoing connection may hold.
port="${APPATTEST_POSTGRES_PORT:-25432}"
data="${APPATTEST_POSTGRES_DATA:-/tmp/appattest-postgres}"
bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
[ -n "$bin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "${1:-}" in
start)
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$data"
        if [ "$(id -u)" -eq 0 ]; then
            chown postgres "$data"
            chmod a+x "$(dirname "$data")"   # mktemp -d makes it 0700: let the postgres user through
        fi
        as_postgres "$bin/initdb" -D "$data" --auth=trust --username=postgres -E UTF8 >/dev/null
    fi
    ca="$(dirname "$data")/postgres-ca.crt"
    if [ ! -f "$data/server.crt" ]; then
        work="$(mktemp -d)"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=appattest test CA" \
            -keyout "$work/ca.key" -out "$ca" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
            -keyout "$data/server.key" -out "$work/server.csr" 2>/dev/null
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$work/san.ext"
        openssl x509 -req -in "$work/server.csr" -CA "$ca" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
            -extfile "$work/san.ext" -out "$data/server.crt" 2>/dev/null
        rm -rf "$work"
        chmod 600 "$data/server.key"
        if [ "$(id -u)" -eq 0 ]; then chown postgres "$data/server.key" "$data/server.crt"; fi
    fi
    as_postgres "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
        -o "-p $port -c listen_addresses=127.0.0.1 -k /tmp -c max_connections=800 -c fsync=on -c ssl=on \
            -c ssl_cert_file=$data/server.crt -c ssl_key_file=$data/server.key" start >/dev/null
    as_postgres "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'appattest'" | grep -q 1 \
        || as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres appattest
    echo "postgres://postgres@127.0.0.1:$port/appattest"
    ;;
stop)
    as_postgres "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 64
    ;;
esac
