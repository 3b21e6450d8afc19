/*-------------------------------------------------------------------------
 *
 * jobflow.c
 *	  Module entry point: settings, shared memory, worker registration and
 *	  the small SQL-callable functions that read the worker's shared state.
 *
 * jobflow must be in shared_preload_libraries: its launcher is registered
 * by the postmaster, and its workers' status lives in shared memory, in
 * one slot per database served (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "jobflow.h"

#include "worker/guard.h"
#include "base/fault.h"
#include "http/http.h"
#include "launcher/launcher.h"

#include <limits.h>

#include "fmgr.h"
#include "funcapi.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "access/htup_details.h"

/* 18+: name and version shown by pg_get_loaded_modules() */
#ifdef PG_MODULE_MAGIC_EXT
PG_MODULE_MAGIC_EXT(.name = "jobflow",.version = JOBFLOW_VERSION);
#else
PG_MODULE_MAGIC;
#endif

char	   *jobflow_database_name = NULL;
/* true in jobflow's background workers (see worker.c) */
bool		jobflow_am_worker = false;

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
int			jobflow_reconcile_ms = 5000;
int			jobflow_shutdown_grace_ms = 5000;
char	   *jobflow_deny_networks = NULL;
char	   *jobflow_allow_networks = NULL;
bool		jobflow_follow_cross_origin_redirects = false;
int			jobflow_retention_s = 7 * 86400;
int			jobflow_prune_batch_size = 100;
bool		jobflow_dispatch = true;
int			jobflow_max_queues_per_role = 1000;
int			jobflow_max_timers_per_role = 1000;

/*
 * Settings bound by a rule on another setting.  The GUC machinery writes
 * what was configured into the guc_* variables; the exported jobflow_*
 * variables of the same settings (above) hold the value in effect, which
 * jobflow_apply_setting_rules() derives from all of them.
 */
static int	guc_max_per_host = 64;
static int	guc_max_per_owner = 1024;
static int	guc_log_flush_ms = 50;
static int	guc_retry_base_ms = 1000;
static int	guc_reconcile_ms = 5000;

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

/* the worker's slot; NULL elsewhere (readers use jf_db_slot) */
JobflowShared *jobflow_shared = NULL;
JobflowShared *jobflow_figures = NULL;
int			jobflow_worker_part = 0;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

void		_PG_init(void);
static void jobflow_define_gucs(void);
static void jobflow_apply_setting_rules(void);
static void jobflow_shmem_request(void);
static void jobflow_shmem_startup(void);

/*
 * The worker and the shared status block only exist when the postmaster
 * loads us, so refuse any other way of loading, with a hint.  pg_upgrade
 * loads every library to check it exists: let it.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
	{
		if (IsBinaryUpgrade)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobflow must be loaded via shared_preload_libraries"),
				 errhint("Add jobflow to shared_preload_libraries in postgresql.conf and restart the server.")));
	}

	jobflow_define_gucs();
	jf_launcher_register();
	jf_guard_init();

#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = jobflow_shmem_request;
#else
	jobflow_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = jobflow_shmem_startup;

}

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
 * Cross-setting rules.  A check hook sees only the values the other
 * settings have now, and a reload sets them one after the other in file
 * order, so a rule checked there would refuse or accept a pair of values
 * depending on which line comes first.  Instead every setting involved
 * records its configured value in an assign hook, and the value in effect
 * of the dependent setting is derived from the whole set after each of
 * them; the worker reports every clamped value once per (re)load
 * (jobflow_report_setting_rules).  Each rule bounds the dependent setting
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
jobflow_apply_setting_rules(void)
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
	jobflow_apply_setting_rules(); \
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
jobflow_report_setting_rules(void)
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

/* All settings in one place, so README and code cannot drift apart. */
static void
jobflow_define_gucs(void)
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
	DefineCustomBoolVariable("jobflow.follow_cross_origin_redirects",
							 "Whether redirects to another scheme, host or port are followed.",
							 "When on, such a hop carries none of the task's headers, "
							 "and a task with a body is never redirected to another origin.",
							 &jobflow_follow_cross_origin_redirects, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

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

	DefineCustomBoolVariable("jobflow.dispatch",
							 "Whether the worker sends callbacks.",
							 "Off, tasks and cron occurrences are still scheduled and kept; they fire when it is on again.",
							 &jobflow_dispatch, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	jf_fault_define_guc();
	MarkGUCPrefixReserved("jobflow");
}

static void
jobflow_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(MAXALIGN(jf_launcher_shmem_size()));
}

/* Create or attach the slots; a zero dboid means "free". */
static void
jobflow_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	jf_launcher_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/* A free slot, with its locks and atomics set up. */
void
jobflow_init_slot(JobflowShared *s)
{
	pg_atomic_uint64 *c;

	memset(s, 0, sizeof(JobflowShared));
	pg_atomic_init_u32(&s->recheck, 0);
	SpinLockInit(&s->mutex);
	SpinLockInit(&s->wake_mutex);
	pg_atomic_init_u64(&s->wake_ranges, 0);
	pg_atomic_init_u64(&s->wake_timers, 0);
	for (c = &s->horizon_end_ms; c <= &s->pruned_log_rows; c++)
		pg_atomic_init_u64(c, 0);
	jf_metrics_shmem_init(&s->metrics);
}

/*
 * A slot's figures start from zero for each database it serves: called by
 * the launcher, under its lock, before it gives the slot to a database
 * (so that none of the database's workers writes them yet; readers of the
 * database that served it before may look meanwhile).  Stores only: no
 * lock is taken but the slot's wake_mutex, never held while taking the
 * launcher's.
 */
void
jobflow_reset_slot(JobflowShared *s)
{
	pg_atomic_uint64 *c;

	SpinLockAcquire(&s->wake_mutex);
	s->nwake = 0;
	s->wake_overflowed = false;
	s->wake_cron = false;
	SpinLockRelease(&s->wake_mutex);
	pg_atomic_write_u64(&s->wake_ranges, 0);
	pg_atomic_write_u64(&s->wake_timers, 0);
	for (c = &s->horizon_end_ms; c <= &s->pruned_log_rows; c++)
		pg_atomic_write_u64(c, 0);
	jf_metrics_reset(&s->metrics);
}

/*
 * A gauge (the pg_atomic_uint64 at offset in the slot) over all workers of
 * this database: each publishes its own in its slot.
 */
uint64
jobflow_gauge_sum(size_t offset)
{
	uint64		sum = 0;
	int			part;
	JobflowShared *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JobflowShared *s = slots[part];

		if (s != NULL)
			sum += pg_atomic_read_u64((pg_atomic_uint64 *) ((char *) s + offset));
	}
	return sum;
}

/* How many of this database's workers are attached to their slots. */
int
jobflow_workers_up(void)
{
	int			up = 0;
	int			part;
	JobflowShared *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JobflowShared *s = slots[part];

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->mutex);
		up += s->dboid == MyDatabaseId && s->worker_pid != 0 ? 1 : 0;
		SpinLockRelease(&s->mutex);
	}
	return up;
}

/*
 * The slot of this database for readers: a zeroed one, local to this
 * process, when no worker serves it (the figures of "no worker").
 */
JobflowShared *
jobflow_reader_slot(void)
{
	static JobflowShared *empty = NULL;
	JobflowShared *s = jf_db_slot(MyDatabaseId);

	if (s != NULL)
		return s;
	if (empty == NULL)
	{
		empty = MemoryContextAlloc(TopMemoryContext, sizeof(JobflowShared));
		jobflow_init_slot(empty);
	}
	return empty;
}

/*
 * Hand the worker what a committed transaction needs it to load, and wake
 * it.  Runs in the commit callback, after the commit is visible: nothing
 * here may fail, so a full ring only says "rescan".
 */
void
jobflow_publish_wake(const int64 *lo, const int64 *hi, int n, bool cron,
					 bool queues)
{
	int			i;
	int			part;
	JobflowShared *slots[JF_MAX_WORKERS_PER_DB];

	/* no worker serves this database: the one to come scans the table */
	if (jf_db_slots(MyDatabaseId, slots) == 0)
		return;
	/* every worker of the database looks at every range: ids interleave */
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JobflowShared *s = slots[part];

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->wake_mutex);
		for (i = 0; i < n; i++)
		{
			JfWakeRange *r;

			if (s->nwake >= JF_WAKE_RING)
			{
				s->wake_overflowed = true;
				break;
			}
			r = &s->wake[s->nwake++];
			r->dboid = MyDatabaseId;
			r->lo = lo[i];
			r->hi = hi[i];
		}
		if (cron)
			s->wake_cron = true;
		SpinLockRelease(&s->wake_mutex);
		if (queues)
			pg_atomic_fetch_add_u64(&s->queues_version, 1);
		jf_slot_wake(s, MyDatabaseId);
	}
	if (slots[0] != NULL)
	{
		pg_atomic_fetch_add_u64(&slots[0]->wake_ranges, n);
		if (cron)
			pg_atomic_fetch_add_u64(&slots[0]->wake_timers, 1);
	}
}

/*
 * Due time the notify trigger compares new tasks against: a task due later
 * need not wake the worker, whose rolling rescan loads it at least one
 * jobflow.reconcile_interval before it is due.  Sparing those transactions
 * NOTIFY spares them its cluster-wide lock, held through the commit's WAL
 * flush.  With no worker attached every pending task is announced.
 */
TimestampTz
jobflow_notify_before(void)
{
	uint64		end_ms = PG_UINT64_MAX;
	TimestampTz result;
	int			part;
	JobflowShared *slots[JF_MAX_WORKERS_PER_DB];

	(void) jf_db_slots(MyDatabaseId, slots);
	/* the earliest of the workers' windows; all of them if one is missing */
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JobflowShared *s = slots[part];
		pid_t		pid = 0;

		if (s != NULL)
		{
			SpinLockAcquire(&s->mutex);
			pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
			SpinLockRelease(&s->mutex);
		}
		if (pid == 0)
			end_ms = 0;
		else
			end_ms = Min(end_ms, pg_atomic_read_u64(&s->notify_before_ms));
	}
	if (end_ms == 0)
	{
		TIMESTAMP_NOEND(result);
		return result;
	}
	return (TimestampTz) ((int64) end_ms * 1000 -
						  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

PG_FUNCTION_INFO_V1(jobflow_wake_horizon);
Datum
jobflow_wake_horizon(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(jobflow_notify_before());
}

static Datum
ms_to_timestamptz_datum(uint64 ms, bool *isnull)
{
	*isnull = (ms == 0);
	return TimestampTzGetDatum((TimestampTz) ((int64) ms * 1000 -
											  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY));
}

/*
 * Wake-ups published since the server started: id ranges of committed
 * tasks the worker had to load soon, and commits that changed timers.
 */
PG_FUNCTION_INFO_V1(jobflow_wakeups);
Datum
jobflow_wakeups(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	JobflowShared *s = jobflow_reader_slot();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int64GetDatum(pg_atomic_read_u64(&s->wake_ranges));
	values[1] = Int64GetDatum(pg_atomic_read_u64(&s->wake_timers));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * What this database's worker is doing, for operators: its pid (NULL when
 * no worker is attached), what it holds and cumulative counters since it
 * began serving the database.
 */
PG_FUNCTION_INFO_V1(jobflow_worker_status);
Datum
jobflow_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[16];
	bool		nulls[16];
	pid_t		pid;
	JobflowShared *s = jobflow_reader_slot();
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	SpinLockAcquire(&s->mutex);
	pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
	SpinLockRelease(&s->mutex);

	values[i] = Int32GetDatum(pid);
	nulls[i++] = (pid == 0);
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->started_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(jobflow_gauge_sum(offsetof(JobflowShared, wheel_tasks)));
	values[i++] = Int64GetDatum(jobflow_gauge_sum(offsetof(JobflowShared, wheel_bytes)));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->horizon_end_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(jobflow_gauge_sum(offsetof(JobflowShared, in_flight)));
	values[i++] = Int64GetDatum(jobflow_gauge_sum(offsetof(JobflowShared, queued)));
	values[i++] = Int64GetDatum(jobflow_gauge_sum(offsetof(JobflowShared, buffered_rows)));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->last_flush_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->fired));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->succeeded));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->failed));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->retried));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushes));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushed_rows));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->statements));
	Assert(i == 16);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
