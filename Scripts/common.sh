# Sourced by Scripts/load.sh, Scripts/scale.sh and Scripts/fleet.sh (from the package's root): the binaries, a work
# folder, PostgreSQL, the test authority, and what to stop when the script exits.
#
# APPATTEST_BINARY: an appattest built elsewhere (another commit, to compare two builds in one session), and
# APPATTEST_DEV_BINARY its appattest-dev (the same binary for builds from before the split); by default this
# checkout's, built here in release. `serve` is the operators' binary; `simulate` and `load` the developer tools'.
if [ -n "${APPATTEST_BINARY:-}" ]; then
    A="$APPATTEST_BINARY"
    D="${APPATTEST_DEV_BINARY:-$APPATTEST_BINARY}"
else
    swift build -c release --traits Service --product appattest >/dev/null
    swift build -c release --traits Service --product appattest-dev >/dev/null
    A=.build/release/appattest
    D=.build/release/appattest-dev
fi
WORK="$(mktemp -d)"
# Processes to kill, then commands to run, at exit (servers first, then what they use).
pids=()
stop_at_exit=()
FAILED=0
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for command in "${stop_at_exit[@]}"; do eval "$command" >/dev/null 2>&1 || true; done
    if [ -n "${STARTED_POSTGRES:-}" ]; then bash .ci/postgres.sh stop; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
# A throwaway PostgreSQL unless APPATTEST_POSTGRES_URL names one.
if [ -z "${APPATTEST_POSTGRES_URL:-}" ]; then
    export APPATTEST_POSTGRES_DATA="$WORK/pgdata"
    APPATTEST_POSTGRES_URL="$(bash .ci/postgres.sh start)"
    STARTED_POSTGRES=1
fi
$D simulate authority --out "$WORK" 2>/dev/null
# Starts an nginx of the script's own, stopped at exit: configuration NAME in $WORK/nginx, one worker, its blocks
# after `events` read from standard input; LINE, if given, goes first (a `load_module`).
start_nginx() { # NAME [LINE]
    mkdir -p "$WORK/nginx"
    {
        if [ -n "${2:-}" ]; then echo "$2"; fi
        printf 'worker_processes 1;\npid %s;\nerror_log %s;\nevents { worker_connections 1024; }\n' \
            "$WORK/nginx/$1.pid" "$WORK/nginx/$1-error.log"
        cat
    } >"$WORK/nginx/$1.conf"
    nginx -c "$WORK/nginx/$1.conf"
    stop_at_exit+=("nginx -c $WORK/nginx/$1.conf -s stop")
}
