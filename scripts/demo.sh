#!/usr/bin/env bash
# scripts/demo.sh: jobflow end to end, from a fresh machine.
#
# Installs what is missing, builds and installs jobflow, starts a throwaway
# cluster with jobflow preloaded and a local HTTP receiver on 127.0.0.1,
# schedules a few callbacks and shows them fire, retry and get logged.
# Everything is stopped on exit.
source "$(dirname "$0")/lib.sh"

ensure_packages
build_and_install

RECEIVER_PID=""
cleanup() {
	[ -n "$RECEIVER_PID" ] && kill "$RECEIVER_PID" 2>/dev/null
	cluster_remove
}
trap cleanup EXIT
# the receiver is on loopback, which jobflow refuses unless allowed
cluster_start demo "${JOBFLOW_DEMO_PORT:-54330}" "jobflow.retry_backoff_base = 500ms" \
	"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"

WORK=$(mktemp -d)
"$PYTHON" "$REPO/test/receiver.py" --port 0 --port-file "$WORK/port" --log "$WORK/requests.log" &
RECEIVER_PID=$!
for _ in $(seq 50); do [ -s "$WORK/port" ] && break; sleep 0.1; done
R="http://127.0.0.1:$(cat "$WORK/port")"
log "HTTP receiver listening on $R"

sql() { psql -X -q -v ON_ERROR_STOP=1 -d jobflow "$@"; }

log "scheduling callbacks"
sql -v r="$R" <<'SQL'
\echo 'SELECT jobflow.schedule(...) -- now, in 1 s, in 2 s, a flaky endpoint and a 404'
SELECT jobflow.schedule(:'r' || '/ok?order=42', body => '{"order": 42}') AS now_task,
       jobflow.schedule(:'r' || '/ok?reminder=7', run_at => now() + interval '1 second',
                        method => 'PUT', headers => '{"Authorization": "Bearer demo"}') AS in_1s,
       jobflow.schedule(:'r' || '/echo', run_at => now() + interval '2 seconds',
                        body_text => 'id=9&format=csv',
                        content_type => 'application/x-www-form-urlencoded') AS in_2s,
       jobflow.schedule(:'r' || '/flaky/2', max_attempts => 5) AS flaky,
       jobflow.schedule(:'r' || '/status/404') AS not_found;
SQL

log "callbacks as the receiver sees them"
seen=0
for _ in $(seq 40); do
	sleep 0.25
	now=$(wc -l <"$WORK/requests.log")
	if [ "$now" -gt "$seen" ]; then
		tail -n +"$((seen + 1))" "$WORK/requests.log" | "$PYTHON" -c '
import json, sys, time
for line in sys.stdin:
    r = json.loads(line)
    h = r["headers"]
    print("%s  %-6s %-22s task %s attempt %s" % (
        time.strftime("%H:%M:%S", time.localtime(r["time"])) + ("%.3f" % (r["time"] % 1))[1:],
        r["method"], (r["path"] + ("?" + r["query"] if r["query"] else ""))[:22], h.get("x-jobflow-task-id"), h.get("x-jobflow-attempt")))'
		seen=$now
	fi
	left=$(sql -At -c "SELECT count(*) FROM jobflow.tasks WHERE state IN ('pending', 'running')")
	[ "$left" = 0 ] && break
done

log "jobflow.tasks"
sql -c "SELECT id, method, url, state, attempts, last_status, run_at::time(3) FROM jobflow.tasks ORDER BY id"
log "jobflow.task_log: every attempt"
sql -c "SELECT task_id, attempt, outcome, http_status,
               round(extract(epoch FROM started_at - scheduled_at) * 1000) AS late_ms, error
          FROM jobflow.task_log ORDER BY task_id, attempt"
log "jobflow.explain(): why each task is where it is"
sql -c "SELECT t.id, e.reason, e.explanation
          FROM jobflow.tasks t, jobflow.explain(t.id) e ORDER BY t.id"
log "jobflow.worker_status()"
sql -x -c "SELECT pid, wheel_tasks, in_flight, fired, succeeded, failed, retried, flushes, statements
             FROM jobflow.worker_status()"
rm -rf "$WORK"
