#!/usr/bin/env bash
# bench/cron_lateness.sh: how late a per-second cron timer's calls arrive.
#
# Starts a throwaway cluster (scripts/lib.sh) with default jobflow settings
# and test/receiver.py on 127.0.0.1, schedules '*/1 * * * * *' against the
# receiver, lets it fire RUNS times (default 90), unschedules it, and prints
# the distribution of lateness = arrival time at the receiver - the
# occurrence's whole second (cron_at), both read from the same clock.
#
#   bench/cron_lateness.sh            RUNS=120 bench/cron_lateness.sh
#   CRON_BENCH_PORT=54412 (default)   SKIP_BUILD=1 to use the installed build
source "$(dirname "$0")/../scripts/lib.sh"

RUNS=${RUNS:-90}
PORT=${CRON_BENCH_PORT:-54412}
WORK=$(mktemp -d /tmp/jobflow-cron-bench.XXXXXX)
RECEIVER_PID=""

cleanup() {
	[ -n "$RECEIVER_PID" ] && kill "$RECEIVER_PID" 2>/dev/null
	cluster_remove
	rm -rf "$WORK"
}
trap cleanup EXIT

[ -n "${SKIP_BUILD:-}" ] || build_and_install
cluster_start cronbench "$PORT" "jobflow.allow_networks = '127.0.0.0/8, ::1/128'"

"$PYTHON" "$REPO/test/receiver.py" --port 0 --port-file "$WORK/port" >/dev/null 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
RPORT=$(cat "$WORK/port")

log "per-second timer for $RUNS runs"
psql -X -q -At -c "SELECT jobflow.schedule_cron('bench', '*/1 * * * * *',
	'http://127.0.0.1:$RPORT/ok')" >/dev/null
deadline=$((SECONDS + RUNS + 30))
while :; do
	done_runs=$(psql -X -q -At -c "SELECT count(*) FROM jobflow.tasks
		WHERE cron_id IS NOT NULL AND state = 'succeeded'")
	[ "$done_runs" -ge "$RUNS" ] && break
	[ $SECONDS -lt $deadline ] || { echo "only $done_runs runs succeeded" >&2; exit 1; }
	sleep 1
done
psql -X -q -At -c "SELECT jobflow.unschedule_cron('bench')" >/dev/null

psql -X -q -At -F ' ' -c "SELECT id, extract(epoch FROM cron_at)::float8 FROM jobflow.tasks
	WHERE cron_id IS NOT NULL AND state = 'succeeded'" >"$WORK/due"
"$PYTHON" -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$RPORT/_requests').read().decode())" >"$WORK/requests"

"$PYTHON" - "$WORK/due" "$WORK/requests" <<'EOF'
import json
import sys

due = {}
with open(sys.argv[1]) as f:
    for line in f:
        task_id, at = line.split()
        due[task_id] = float(at)
reqs = json.load(open(sys.argv[2]))
late = []
seen = set()
for r in reqs:
    task_id = r["headers"].get("x-jobflow-task-id")
    if task_id in due and task_id not in seen:
        seen.add(task_id)
        late.append((r["time"] - due[task_id]) * 1000.0)
late.sort()
if not late:
    sys.exit("no calls matched their tasks")


def pct(p):
    return late[min(len(late) - 1, int(round(p / 100.0 * (len(late) - 1))))]


print("runs %d  (calls before their second: %d)" % (len(late), sum(1 for x in late if x < 0)))
print("lateness ms: min %.2f  p50 %.2f  p95 %.2f  p99 %.2f  max %.2f"
      % (late[0], pct(50), pct(95), pct(99), late[-1]))
EOF
