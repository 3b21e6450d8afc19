/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  Every jobflow.* setting: its variable, its definition, its checks,
 *	  and the rules between settings.
 *
 * All settings are defined here, in one place (from _PG_init), so the
 * documentation (docs/settings.md) and the code cannot drift apart; the
 * modules that use a setting read its variable (settings.h).  Settings
 * bound by a rule on another setting hold the value in effect, derived
 * from what was configured by the assign hooks below.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "base/settings.h"
#include "base/compat.h"
#include "base/fault.h"
#include "http/http.h"

char	   *jobflow_database_name = NULL;
int			jobflow_max_databases = 8;
int			jobflow_workers_per_database = 1;
int			jobflow_horizon_s = 3600;
int			jobflow_max_body_size = 1024 * 1024;
int			jobflow_max_headers_size = 16 * 1024;
int			jobflow_max_concurrent = 4096;
int			jobflow_max_per_host = 64;
int			jobflow_max_per_owner = 1024;
double		jobflow_max_rate_per_host = 0;
int			jobflow_max_response_size = 4096;
int			jobflow_max_redirects = 3;
int			jobflow_log_batch_size = 500;
int			jobflow_log_flush_ms = 50;
int			jobflow_claim_batch_size = 1000;
int			jobflow_retry_base_ms = 1000;
int			jobflow_retry_max_ms = 3600 * 1000;
int			jobflow_circuit_failures = 10;
int			jobflow_circuit_window_s = 60;
int			jobflow_circuit_probe_min_s = 5;
int			jobflow_circuit_probe_max_s = 300;
int			jobflow_reconcile_ms = 5000;
int			jobflow_shutdown_grace_ms = 5000;
char	   *jobflow_deny_networks = NULL;
char	   *jobflow_allow_networks = NULL;
char	   *jobflow_tls_ca_file = NULL;
char	   *jobflow_tls_ca_path = NULL;
bool		jobflow_follow_cross_origin_redirects = false;
int			jobflow_retention_s = 7 * 86400;
int			jobflow_prune_batch_size = 100;
int			jobflow_dispatch = JF_DISPATCH_AUTO;
int			jobflow_log_attempts = JF_LOG_ATTEMPTS_ALL;
int			jobflow_max_queues_per_role = 1000;
int			jobflow_max_timers_per_role = 1000;

/*
 * Settings bound by a rule on another setting.  The GUC machinery writes
 * what was configured into the guc_* variables; the exported jobflow_*
 * variables of the same settings (above) hold the value in effect, which
 * apply_setting_rules() derives from all of them.
 */
/*
 * jobflow.dispatch's values; the boolean spellings of the setting it was
 * before it had auto (on, off, true, false, yes, no, 1, 0) still parse.
 */
static const struct config_enum_entry dispatch_options[] = {
	{"auto", JF_DISPATCH_AUTO, false},
	{"on", JF_DISPATCH_ON, false},
	{"off", JF_DISPATCH_OFF, false},
	{"true", JF_DISPATCH_ON, true},
	{"false", JF_DISPATCH_OFF, true},
	{"yes", JF_DISPATCH_ON, true},
	{"no", JF_DISPATCH_OFF, true},
	{"1", JF_DISPATCH_ON, true},
	{"0", JF_DISPATCH_OFF, true},
	{NULL, 0, false}
};

/* jobflow.log_attempts's values */
static const struct config_enum_entry log_attempts_options[] = {
	{"all", JF_LOG_ATTEMPTS_ALL, false},
	{"failures", JF_LOG_ATTEMPTS_FAILURES, false},
	{NULL, 0, false}
};

static int	guc_max_per_host = 64;
static int	guc_max_per_owner = 1024;
static int	guc_log_flush_ms = 50;
static int	guc_retry_base_ms = 1000;
static int	guc_reconcile_ms = 5000;

/* jobflow.net_max_attempts: no C reads it, extension jobflow_net's SQL does */
static int	guc_net_max_attempts = 1;

/*
 * What every setting involved in a rule was configured to, written by the
 * assign hooks.  An assign hook runs before the GUC machinery stores the
 * new value, so the rules read these rather than the GUC variables.
 */
static struct
{
	int			horizon_s;
	int			max_concurrent;
	int			max_per_host;
	int			max_per_owner;
	int			log_flush_ms;
	int			retry_base_ms;
	int			retry_max_ms;
	int			reconcile_ms;
}			configured = {3600, 4096, 64, 1024, 50, 1000, 3600 * 1000, 5000};

/*
 * deny_networks and allow_networks share a syntax: addr[/bits][:port],
 * IPv6 between brackets when a port follows.
 */
static bool
check_networks(char **newval, void **extra, GucSource source)
{
	char		err[160];

	if (jf_http_check_networks(*newval, err, sizeof(err)))
		return true;
	GUC_check_errdetail("The list must hold IPv4 or IPv6 addresses with optional /bits and :port (an IPv6 address between brackets when a port follows, as in [2001:db8::]/32:443), but has an %s.", err);
	return false;
}

/*
 * The worker reads the file when it opens a TLS connection, relative to
 * its data directory if the path were relative: an absolute path (or
 * empty, for libcurl's own bundle) avoids that surprise.  Whether the
 * file holds certificates shows at the first connection, as a TLS
 * outcome that names it.
 */
static bool
check_ca_file(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0' || (*newval)[0] == '/')
		return true;
	GUC_check_errdetail("The path must be absolute, or empty for the system's certificate bundle.");
	return false;
}

/*
 * The CA directory, like the file, is read by the worker at each TLS
 * connection: an absolute path, or empty for none.  OpenSSL looks
 * certificates up there by the hashed names c_rehash (openssl rehash)
 * gives them; a directory without those names trusts nothing, which shows
 * as a TLS outcome at the first connection.
 */
static bool
check_ca_path(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0' || (*newval)[0] == '/')
		return true;
	GUC_check_errdetail("The path must be absolute, or empty for no directory.");
	return false;
}

/*
 * Cross-setting rules.  A check hook sees only the values the other
 * settings have now, and a reload sets them one after the other in file
 * order, so a rule checked there would refuse or accept a pair of values
 * depending on which line comes first.  Instead every setting involved
 * records its configured value in an assign hook, and the value in effect
 * of the dependent setting is derived from the whole set after each of
 * them; the worker reports every clamped value once per (re)load
 * (jf_settings_report_rules).  Each rule bounds the dependent setting
 * by its counterpart:
 *
 * reconcile_interval <= horizon / 3: the rolling rescan must extend the
 *		horizon well before the worker reaches its end, or tasks due beyond
 *		the notify window are loaded, and fired, up to an interval late.
 * log_flush_ms <= reconcile_interval: an outcome must be written before
 *		the next rescan looks at the task it belongs to.
 * retry_backoff_base <= retry_backoff_max: the first retry cannot wait
 *		longer than the longest delay.
 * max_requests_per_host <= max_concurrent_requests: a per-host cap above
 *		the global one promises concurrency that never happens.
 * max_requests_per_owner <= max_concurrent_requests: likewise, per role.
 */
static void
apply_setting_rules(void)
{
	int			reconcile_max = (int) Min((int64) configured.horizon_s * 1000 / 3, INT_MAX);

	jobflow_reconcile_ms = Min(configured.reconcile_ms, reconcile_max);
	jobflow_log_flush_ms = Min(configured.log_flush_ms, jobflow_reconcile_ms);
	jobflow_retry_base_ms = Min(configured.retry_base_ms, configured.retry_max_ms);
	jobflow_max_per_host = Min(configured.max_per_host, configured.max_concurrent);
	jobflow_max_per_owner = Min(configured.max_per_owner, configured.max_concurrent);
}

/*
 * One assign hook per setting involved in a rule: record what was
 * configured, then derive every value in effect again, so the result does
 * not depend on the order in which a reload assigns the settings.
 */
#define JOBFLOW_ASSIGN_HOOK(field) \
static void \
assign_##field(int newval, void *extra) \
{ \
	configured.field = newval; \
	apply_setting_rules(); \
}

JOBFLOW_ASSIGN_HOOK(horizon_s)
JOBFLOW_ASSIGN_HOOK(max_concurrent)
JOBFLOW_ASSIGN_HOOK(max_per_host)
JOBFLOW_ASSIGN_HOOK(max_per_owner)
JOBFLOW_ASSIGN_HOOK(log_flush_ms)
JOBFLOW_ASSIGN_HOOK(retry_base_ms)
JOBFLOW_ASSIGN_HOOK(retry_max_ms)
JOBFLOW_ASSIGN_HOOK(reconcile_ms)

/*
 * One WARNING per rule the configuration breaks, naming both settings and
 * the value in effect.  Called by the worker after it (re)reads the
 * configuration, so a DBA finds it next to the reload in the server log.
 */
void
jf_settings_report_rules(void)
{
	if (jobflow_reconcile_ms != configured.reconcile_ms)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobflow.reconcile_interval (%d ms) is more than a third of jobflow.horizon (%d s)",
						configured.reconcile_ms, configured.horizon_s),
				 errdetail("The worker uses jobflow.reconcile_interval = %d ms.",
						   jobflow_reconcile_ms),
				 errhint("Lower jobflow.reconcile_interval or raise jobflow.horizon.")));
	if (jobflow_log_flush_ms != configured.log_flush_ms)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobflow.log_flush_ms (%d ms) is more than jobflow.reconcile_interval (%d ms in effect)",
						configured.log_flush_ms, jobflow_reconcile_ms),
				 errdetail("The worker uses jobflow.log_flush_ms = %d ms.",
						   jobflow_log_flush_ms),
				 errhint("Lower jobflow.log_flush_ms or raise jobflow.reconcile_interval.")));
	if (jobflow_retry_base_ms != configured.retry_base_ms)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobflow.retry_backoff_base (%d ms) is more than jobflow.retry_backoff_max (%d ms)",
						configured.retry_base_ms, configured.retry_max_ms),
				 errdetail("The worker uses jobflow.retry_backoff_base = %d ms.",
						   jobflow_retry_base_ms),
				 errhint("Lower jobflow.retry_backoff_base or raise jobflow.retry_backoff_max.")));
	if (jobflow_max_per_host != configured.max_per_host)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobflow.max_requests_per_host (%d) is more than jobflow.max_concurrent_requests (%d)",
						configured.max_per_host, configured.max_concurrent),
				 errdetail("The worker uses jobflow.max_requests_per_host = %d.",
						   jobflow_max_per_host),
				 errhint("Lower jobflow.max_requests_per_host or raise jobflow.max_concurrent_requests.")));
	if (jobflow_max_per_owner != configured.max_per_owner)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("jobflow.max_requests_per_owner (%d) is more than jobflow.max_concurrent_requests (%d)",
						configured.max_per_owner, configured.max_concurrent),
				 errdetail("The worker uses jobflow.max_requests_per_owner = %d.",
						   jobflow_max_per_owner),
				 errhint("Lower jobflow.max_requests_per_owner or raise jobflow.max_concurrent_requests.")));
}

/*
 * jobflow.database_name is deprecated: every database with the extension
 * is served.  It reads as the current database, because the shipped 0.1.0
 * install script compares the two and warns, wrongly now, when they differ.
 */
static const char *
show_database_name(void)
{
	if (OidIsValid(MyDatabaseId) && IsTransactionState())
	{
		char	   *name = get_database_name(MyDatabaseId);

		if (name != NULL)
			return name;
	}
	return jobflow_database_name ? jobflow_database_name : "";
}

/*
 * A per-host rate is 0 (no limit) or at least JF_MIN_RATE a second: a
 * smaller one would keep a host's next request waiting for days.
 */
static bool
check_rate_per_host(double *newval, void **extra, GucSource source)
{
	if (*newval > 0 && *newval < JF_MIN_RATE)
	{
		GUC_check_errdetail("A rate is 0 (no limit) or at least %g requests per second.",
							JF_MIN_RATE);
		return false;
	}
	return true;
}

/*
 * A per-role limit (jobflow.max_queues_per_role, _timers_per_role) holds
 * for the whole database, whoever checks it: a value set for one session,
 * one role or one database would let some sessions of a role create what
 * the others then count against it.  Only the server's configuration
 * (postgresql.conf, ALTER SYSTEM, the command line) sets it.
 */
static bool
check_per_role_limit(int *newval, void **extra, GucSource source)
{
	if (source >= PGC_S_GLOBAL)
	{
		GUC_check_errdetail("It is a limit for the whole server: set it in postgresql.conf or with ALTER SYSTEM, not per database, role or session.");
		return false;
	}
	return true;
}

/* From _PG_init: define every setting of jobflow. */
void
jf_settings_define(void)
{
	DefineCustomStringVariable("jobflow.database_name",
							   "Deprecated and ignored: every database with extension jobflow is served.",
							   "Reads as the current database.",
							   &jobflow_database_name, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, show_database_name);
	DefineCustomIntVariable("jobflow.max_databases",
							"Most databases with a jobflow worker.",
							"Each database served takes a background worker (see max_worker_processes) and a slot of shared memory.",
							&jobflow_max_databases, 8, 1, 1024,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.workers_per_database",
							"Workers that share each database's tasks.",
							"Each serves the task ids equal to its number modulo this; the first also runs cron timers and pruning.  Caps and rates are split among them.  Each takes a background worker (see max_worker_processes).",
							&jobflow_workers_per_database, 1, 1, JF_MAX_WORKERS_PER_DB,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.horizon",
							"How far ahead the worker keeps due tasks in memory.",
							"Tasks due later stay in the table until the horizon reaches them.",
							&jobflow_horizon_s, 3600, 60, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, assign_horizon_s, NULL);
	DefineCustomIntVariable("jobflow.max_body_size",
							"Largest request body a task may carry.",
							NULL, &jobflow_max_body_size, 1024 * 1024, 0, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_headers_size",
							"Largest total size of a task's request headers.",
							NULL, &jobflow_max_headers_size, 16 * 1024, 0, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_concurrent_requests",
							"Most HTTP requests the worker has in flight at once.",
							"Each costs a socket and some memory only: sized for thousands, so that slow hosts leave room for the others.",
							&jobflow_max_concurrent, 4096, 1, 65536,
							PGC_SIGHUP, 0, NULL, assign_max_concurrent, NULL);
	DefineCustomIntVariable("jobflow.max_requests_per_host",
							"Most HTTP requests in flight to one host and port.",
							"At most jobflow.max_concurrent_requests.",
							&guc_max_per_host, 64, 1, 65536,
							PGC_SIGHUP, 0, NULL, assign_max_per_host, NULL);
	DefineCustomIntVariable("jobflow.max_requests_per_owner",
							"Most HTTP requests of one owner's tasks claimed and not finished.",
							"Whatever the number of hosts a role sends to, the rest of jobflow.max_concurrent_requests stays free for other roles.  At most jobflow.max_concurrent_requests.",
							&guc_max_per_owner, 1024, 1, 65536,
							PGC_SIGHUP, 0, NULL, assign_max_per_owner, NULL);
	DefineCustomRealVariable("jobflow.max_requests_per_second_per_host",
							 "Most HTTP requests sent to one host and port per second; 0 means no limit.",
							 "Spread evenly, never more within any one second, and shared by every owner sending there.",
							 &jobflow_max_rate_per_host, 0, 0, JF_MAX_RATE,
							 PGC_SIGHUP, 0, check_rate_per_host, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_response_size",
							"How much of each response body is kept in the task log.",
							"Once a response has more, the worker stops reading it: the status decides the outcome.",
							&jobflow_max_response_size, 4096, 0, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_redirects",
							"Most redirects followed per request (0 follows none).",
							NULL, &jobflow_max_redirects, 3, 0, 20,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.log_batch_size",
							"Outcomes buffered before the worker writes them.",
							NULL, &jobflow_log_batch_size, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.log_flush_ms",
							"Longest time an outcome stays buffered before it is written.",
							"At most jobflow.reconcile_interval.",
							&guc_log_flush_ms, 50, 1, 60000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, assign_log_flush_ms, NULL);
	DefineCustomEnumVariable("jobflow.log_attempts",
							 "Which attempts the worker writes to jobflow.task_log: all or failures.",
							 "Failures: a task that succeeds at its first attempt writes no log row (its row in "
							 "jobflow.tasks says succeeded); every other attempt is logged, and so is the success "
							 "that ends a task with earlier attempts. A queue's log_attempts (set_queue) overrides it.",
							 &jobflow_log_attempts, JF_LOG_ATTEMPTS_ALL, log_attempts_options,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.claim_batch_size",
							"Most due tasks claimed by one statement.",
							NULL, &jobflow_claim_batch_size, 1000, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.retry_backoff_base",
							"Delay before the first retry; it doubles with each attempt.",
							"At most jobflow.retry_backoff_max.",
							&guc_retry_base_ms, 1000, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, assign_retry_base_ms, NULL);
	DefineCustomIntVariable("jobflow.retry_backoff_max",
							"Longest delay between two attempts, Retry-After included.",
							NULL, &jobflow_retry_max_ms, 3600 * 1000, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, assign_retry_max_ms, NULL);
	/*
	 * Circuits per (owner, origin) (core/circuit.h): ten failures in a row
	 * within a minute is an origin that is down, not one that hiccups (a
	 * task's own retries ride out a few); a probe 5 s later, then every
	 * 10, 20, ... up to 5 minutes, finds it back soon without hammering it.
	 * A probe_max below probe_min is probe_min.
	 */
	DefineCustomIntVariable("jobflow.circuit_failures",
							"Consecutive failures of one owner's requests to one origin that open its circuit; 0 means no circuits.",
							"Failures are connection errors, timeouts, TLS and DNS errors and 5xx answers; any other answer counts them again from zero.",
							&jobflow_circuit_failures, 10, 0, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.circuit_window",
							"How long after the first of them the consecutive failures must all come to open a circuit.",
							NULL, &jobflow_circuit_window_s, 60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.circuit_probe_min",
							"How long an open circuit waits before its first probe; each failed probe doubles it.",
							NULL, &jobflow_circuit_probe_min_s, 5, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.circuit_probe_max",
							"Longest wait between two probes of an open circuit.",
							"At least jobflow.circuit_probe_min.",
							&jobflow_circuit_probe_max_s, 300, 1, 7 * 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.reconcile_interval",
							"How often the worker rescans the table for tasks it was not told about.",
							"At most a third of jobflow.horizon.",
							&guc_reconcile_ms, 5000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, assign_reconcile_ms, NULL);
	DefineCustomIntVariable("jobflow.retention",
							"How long finished tasks and their log rows are kept.",
							"Succeeded, failed and cancelled tasks older than this are pruned by the worker; 0 keeps everything.",
							&jobflow_retention_s, 7 * 86400, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.prune_batch_size",
							"How many finished tasks the worker prunes in one transaction.",
							NULL, &jobflow_prune_batch_size, 100, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.shutdown_grace",
							"How long a stopping worker waits for requests in flight.",
							NULL, &jobflow_shutdown_grace_ms, 5000, 0, 600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);

	/*
	 * Loopback, private and the other non-public networks are refused by
	 * default: a tenant's callback must not reach the database's host, the
	 * site's other services or cloud metadata, and read the answer into
	 * its log.  A site lets its own receivers through with allow_networks.
	 */
	DefineCustomStringVariable("jobflow.deny_networks",
							   "Networks the worker never connects to, unless jobflow.allow_networks allows them.",
							   "A list of address/prefix entries, IPv4 or IPv6, each with an optional port. Checked at connect time, "
							   "so host names and redirects that lead there are refused too.",
							   &jobflow_deny_networks, JF_HTTP_DEFAULT_DENY_NETWORKS,
							   PGC_SIGHUP, 0, check_networks, NULL, NULL);
	DefineCustomStringVariable("jobflow.allow_networks",
							   "Networks the worker connects to although jobflow.deny_networks covers them.",
							   "A list of address/prefix entries, IPv4 or IPv6, each with an optional port, as in jobflow.deny_networks. "
							   "Unspecified addresses (0.0.0.0/8, ::) are refused whatever the lists.",
							   &jobflow_allow_networks, "",
							   PGC_SIGHUP, 0, check_networks, NULL, NULL);
	DefineCustomStringVariable("jobflow.tls_ca_file",
							   "File of the certificate authorities the worker trusts for https:// callbacks.",
							   "An absolute path to a PEM bundle; empty: the bundle libcurl was built with (the system's).",
							   &jobflow_tls_ca_file, "",
							   PGC_SIGHUP, 0, check_ca_file, NULL, NULL);
	DefineCustomStringVariable("jobflow.tls_ca_path",
							   "Directory of the certificate authorities the worker trusts for https:// callbacks.",
							   "An absolute path to a directory of PEM certificates under their hashed names (openssl rehash); "
							   "empty: none. When set, libcurl's own bundle is no longer trusted, only this directory "
							   "and jobflow.tls_ca_file if that is set.",
							   &jobflow_tls_ca_path, "",
							   PGC_SIGHUP, 0, check_ca_path, NULL, NULL);
	DefineCustomBoolVariable("jobflow.follow_cross_origin_redirects",
							 "Whether redirects to another scheme, host or port are followed.",
							 "When on, such a hop carries none of the task's headers, "
							 "and a task with a body is never redirected to another origin.",
							 &jobflow_follow_cross_origin_redirects, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	/*
	 * Read by extension jobflow_net's net.http_get/post/delete, whose
	 * signatures (pg_net's) have no place for it: pg_net never retries, so
	 * neither do they unless the operator asks, for a role, a database or
	 * the server.  A superuser setting: they read it from the session that
	 * calls them, also inside another role's SECURITY DEFINER function (a
	 * webhook trigger), where a setting of the caller's own would choose
	 * how often that role's request is sent.
	 */
	DefineCustomIntVariable("jobflow.net_max_attempts",
							"Attempts of each request made through extension jobflow_net (net.http_get, http_post, http_delete).",
							"1, the default, sends each request once, as pg_net does.",
							&guc_net_max_attempts, 1, 1, 1000,
							PGC_SUSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("jobflow.max_queues_per_role",
							"Most configured queues (rows of jobflow.queues) one role may have; 0 means no limit.",
							"Checked when pause_queue() or set_queue() would make a new row; a restore brings back what it dumped.",
							&jobflow_max_queues_per_role, 1000, 0, INT_MAX,
							PGC_SUSET, 0, check_per_role_limit, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_timers_per_role",
							"Most cron timers one role may have; 0 means no limit.",
							"Checked when a timer is created; a restore brings back what it dumped.",
							&jobflow_max_timers_per_role, 1000, 0, INT_MAX,
							PGC_SUSET, 0, check_per_role_limit, NULL, NULL);

	DefineCustomEnumVariable("jobflow.dispatch",
							 "Whether the workers fire tasks: auto, on or off.",
							 "Off, every worker holds: it claims nothing and writes nothing to jobflow's tables "
							 "of its own (requests in flight finish and are recorded). Auto, a worker also holds "
							 "while its database subscribes to jobflow's tables by logical replication.",
							 &jobflow_dispatch, JF_DISPATCH_AUTO, dispatch_options,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomStringVariable("jobflow.inject_error",
							   "Raises an ERROR in the worker at the named point, for tests.",
							   "Once per change of the setting; a name ending in * raises every time.",
							   &jobflow_inject_error, "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, jf_fault_assign, NULL);
	DefineCustomStringVariable("jobflow.test_doh_url",
							   "Resolves the worker's host names by DNS over HTTPS at this URL, for tests.",
							   "Empty: the system's resolver.",
							   &jobflow_test_doh_url, "",
							   PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							   NULL, NULL, NULL);
	jf_reserve_guc_prefix("jobflow");
}
