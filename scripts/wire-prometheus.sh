#!/usr/bin/env bash
# scripts/wire-prometheus.sh: wire Debian's prometheus and
# prometheus-postgres-exporter to jobflow's figures, alerts included.
#
#   sudo scripts/wire-prometheus.sh DATABASE...
#
# For each DATABASE (one where jobflow is installed), the exporter connects
# as the role prometheus over the local socket (make it first:
# CREATE ROLE prometheus LOGIN IN ROLE pg_monitor) and reads
# prometheus/jobflow_queries.yaml; Prometheus scrapes the exporter (job
# "postgres", localhost:9187) and loads prometheus/alerts.yml.  It edits
# /etc/default/prometheus-postgres-exporter and /etc/prometheus/prometheus.yml
# in place, checks the result with promtool, and restarts the exporter and
# reloads Prometheus.  Running it again changes nothing.  JOBFLOW_ETC (default
# /etc) edits another tree; JOBFLOW_NO_RESTART=1 leaves the services alone.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
ETC=${JOBFLOW_ETC:-/etc}
DEFAULTS="$ETC/default/prometheus-postgres-exporter"
CONFIG="$ETC/prometheus/prometheus.yml"

[ $# -ge 1 ] || { echo "usage: $0 DATABASE..." >&2; exit 2; }
for f in "$DEFAULTS" "$CONFIG"; do
	[ -f "$f" ] || { echo "$f not found: install prometheus and prometheus-postgres-exporter first" >&2; exit 1; }
done

install -m 644 "$REPO/prometheus/jobflow_queries.yaml" "$ETC/prometheus/jobflow_queries.yaml"
install -m 644 "$REPO/prometheus/alerts.yml" "$ETC/prometheus/jobflow_alerts.yml"

# the exporter: one connection string per database, and jobflow's queries
dsn=""
for db in "$@"; do
	case "$db" in
		*[!A-Za-z0-9_-]*) echo "database name \"$db\": use letters, digits, _ and - only" >&2; exit 2 ;;
	esac
	dsn="${dsn:+$dsn,}user=prometheus host=/run/postgresql dbname=$db"
done
sed -i "s|^DATA_SOURCE_NAME=.*|DATA_SOURCE_NAME='$dsn'|" "$DEFAULTS"
if ! grep -q -- "--extend.query-path=$ETC/prometheus/jobflow_queries.yaml" "$DEFAULTS"; then
	sed -i "s|^ARGS=\"\\(.*\\)\"|ARGS=\"\\1 --extend.query-path=$ETC/prometheus/jobflow_queries.yaml\"|; s|^ARGS=\" |ARGS=\"|" "$DEFAULTS"
fi

# Prometheus: the alert rules and a scrape job for the exporter
if ! grep -q "^ *- *jobflow_alerts.yml" "$CONFIG"; then
	sed -i 's|^rule_files:.*|rule_files:\n  - jobflow_alerts.yml|' "$CONFIG"
fi
if ! grep -q "job_name: *'\?postgres'\?$" "$CONFIG"; then
	printf '  - job_name: postgres\n    static_configs:\n      - targets: ["localhost:9187"]\n' >> "$CONFIG"
fi

promtool check config "$CONFIG"
if [ -z "${JOBFLOW_NO_RESTART:-}" ] && command -v systemctl >/dev/null; then
	systemctl restart prometheus-postgres-exporter
	systemctl reload prometheus
fi
echo "wired: the exporter reads $* with jobflow's queries; Prometheus scrapes it and loads jobflow_alerts.yml"
