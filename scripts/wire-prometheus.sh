#!/usr/bin/env bash
# scripts/wire-prometheus.sh: wire Debian's prometheus and
# prometheus-postgres-exporter to jobflow's figures, alerts included.
#
#   sudo scripts/wire-prometheus.sh DATABASE...
#
# For each DATABASE (one where jobflow is installed), the exporter connects
# as the role prometheus over the local socket (make it first:
# CREATE ROLE prometheus LOGIN IN ROLE pg_monitor; the first DATABASE is the
# one it connects to, the others it finds from there) and reads
# prometheus/jobflow_queries.yaml; Prometheus scrapes the exporter (job
# "postgres", localhost:9187) and loads prometheus/alerts.yml.  It edits
# /etc/default/prometheus-postgres-exporter and /etc/prometheus/prometheus.yml
# (copies of them, which replace them once promtool accepts the result),
# and restarts the exporter and
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

# Both files are edited as copies next to them, and replace them only once
# promtool accepts the result: a refusal leaves them as they were.
new_defaults="$DEFAULTS.jobflow-new"
new_config="$CONFIG.jobflow-new"
trap 'rm -f "$new_defaults" "$new_config"' EXIT
cp -p "$DEFAULTS" "$new_defaults"
cp -p "$CONFIG" "$new_config"

# The exporter: a connection to the first database, and the others found
# from it (--auto-discover-databases, limited to those named).  One
# connection string per database would have the exporter collect its own
# figures of the server once per connection, and it then answers every
# scrape with HTTP 500 ("collected before with the same name and label
# values").
for db in "$@"; do
	case "$db" in
		''|*[!A-Za-z0-9_-]*) echo "database name \"$db\": use letters, digits, _ and - only" >&2; exit 2 ;;
	esac
done
dbs=$(IFS=,; echo "$*")
dsn="user=prometheus host=/run/postgresql dbname=$1"
sed -i "s|^DATA_SOURCE_NAME=.*|DATA_SOURCE_NAME='$dsn'|" "$new_defaults"
ours="--extend.query-path=$ETC/prometheus/jobflow_queries.yaml --auto-discover-databases --include-databases=$dbs"
sed -i -E "/^ARGS=\"/{
	s#^ARGS=\"#ARGS=\" #
	s# --extend\.query-path=[^ \"]*jobflow_queries\.yaml##g
	s# --auto-discover-databases##g
	s# --include-databases=[^ \"]*##g
	s#^ARGS=\"(.*)\"#ARGS=\"\1 $ours\"#
	s#^ARGS=\" +#ARGS=\"#
}" "$new_defaults"
grep -q -- "^ARGS=\".*$ours\"" "$new_defaults" ||
	{ echo "$DEFAULTS: no line ARGS=\"...\" to add jobflow's arguments to" >&2; exit 1; }

# Prometheus: the alert rules and a scrape job for the exporter
if ! grep -q "^ *- *jobflow_alerts.yml" "$new_config"; then
	grep -q '^rule_files: *$' "$new_config" ||
		{ echo "$CONFIG: no block \"rule_files:\" to add jobflow_alerts.yml to; add it yourself" >&2; exit 1; }
	sed -i 's|^rule_files: *$|rule_files:\n  - jobflow_alerts.yml|' "$new_config"
fi
if ! grep -q "job_name: *[\"']\?postgres[\"']\? *\(#.*\)\?$" "$new_config"; then
	printf '  - job_name: postgres\n    static_configs:\n      - targets: ["localhost:9187"]\n' >> "$new_config"
fi

promtool check config "$new_config"
mv "$new_defaults" "$DEFAULTS"
mv "$new_config" "$CONFIG"
if [ -z "${JOBFLOW_NO_RESTART:-}" ] && command -v systemctl >/dev/null; then
	systemctl restart prometheus-postgres-exporter
	systemctl reload prometheus
fi
echo "wired: the exporter reads $* with jobflow's queries; Prometheus scrapes it and loads jobflow_alerts.yml"
