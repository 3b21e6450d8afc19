/*-------------------------------------------------------------------------
 *
 * circuits.c
 *	  What SQL sees of the workers' circuits per (owner, origin), and how
 *	  it closes one.
 *
 * Each worker publishes the circuits that count failures or are open into
 * its slot (worker/worker.c, publish_circuits).  jobflow._endpoints(),
 * under the view jobflow.endpoints, shows the caller those of the roles
 * whose privileges it has, and members of jobflow_admin all of them, as
 * row-level security shows tasks: a tenant never sees which origins
 * another tenant sends to, nor that they fail.  jobflow.reset_circuit()
 * posts a reset into the slots and wakes the workers; an owner's resets
 * take at most a quarter of a slot's places (post_reset).
 *
 * A circuit is per (owner, origin) (core/circuit.h): whatever a tenant's
 * requests do to an origin, only its own circuit opens, so neither what it
 * sends nor what it resets holds or releases another tenant's tasks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

#include "api/circuits.h"
#include "api/tenant_api.h"
#include "base/compat.h"
#include "core/fair.h"
#include "launcher/slots.h"

/* A consistent copy of a slot's circuits; retries while one is written. */
static int
read_circuits(JfMetricsShared *m, JfCircuitShared *out, int *open)
{
	for (;;)
	{
		uint32		before = pg_atomic_read_u32(&m->circuits_changecount);
		int			n;
		int			i;

		pg_read_barrier();
		n = Min(Max(m->ncircuits, 0), JF_METRICS_CIRCUITS);
		memcpy(out, m->circuits, sizeof(JfCircuitShared) * n);
		*open = m->circuits_open;
		pg_read_barrier();
		if ((before & 1) == 0 && before == pg_atomic_read_u32(&m->circuits_changecount))
		{
			for (i = 0; i < n; i++)
				out[i].origin[sizeof(out[i].origin) - 1] = '\0';
			return n;
		}
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Every running worker's circuits (a worker's tasks are its share of the
 * ids, so each has circuits of its own), and in *open how many are open.
 */
static JfCircuitShared *
all_circuits(int *n, int *open)
{
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	JfCircuitShared *all = palloc(sizeof(JfCircuitShared) * JF_METRICS_CIRCUITS *
								  JF_MAX_WORKERS_PER_DB);
	int			part;

	*n = 0;
	*open = 0;
	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		pid_t		pid;
		int			k;
		int			o;

		if (s == NULL)
			continue;
		SpinLockAcquire(&s->mutex);
		pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
		SpinLockRelease(&s->mutex);
		if (pid == 0)
			continue;			/* what it published is gone with it */
		k = read_circuits(&s->metrics, all + *n, &o);
		/* given to another database while it was read: none of ours */
		SpinLockAcquire(&s->mutex);
		if (s->dboid != MyDatabaseId || s->worker_pid != pid)
			k = o = 0;
		SpinLockRelease(&s->mutex);
		*n += k;
		*open += o;
	}
	return all;
}

JfCircuitShared *
jf_published_circuits(int *n)
{
	int			open;

	return all_circuits(n, &open);
}

int
jf_circuits_open_total(void)
{
	int			n;
	int			open;

	pfree(all_circuits(&n, &open));
	return open;
}

bool
jf_circuit_of(Oid owner, const char *origin, JfCircuitShared *out)
{
	int			n;
	JfCircuitShared *all = jf_published_circuits(&n);
	bool		found = false;
	int			i;

	for (i = 0; i < n; i++)
	{
		if (all[i].owner != owner || strcmp(all[i].origin, origin) != 0)
			continue;
		/* with several workers: the one that holds it, open first */
		if (!found || (out->state == 0 && all[i].state != 0))
			*out = all[i];
		found = true;
	}
	pfree(all);
	return found;
}

const char *
jf_circuit_state_name(int32 state)
{
	switch (state)
	{
		case 1:
			return "open";
		case 2:
			return "half_open";
		default:
			return "closed";
	}
}

/* A unix-milliseconds time as timestamptz. */
static TimestampTz
ms_to_ts(int64 ms)
{
	return ms * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/*
 * jobflow._endpoints() RETURNS TABLE (owner regrole, origin text, state
 * text, since timestamptz, failures integer, held_tasks bigint, next_probe
 * timestamptz): the circuits the caller may see, for the view
 * jobflow.endpoints.  With several workers per database, a circuit of
 * (owner, origin) may show once per worker that sends there.
 */
PG_FUNCTION_INFO_V1(jobflow_endpoints);
Datum
jobflow_endpoints(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			me = GetUserId();
	Oid			admin = get_role_oid("jobflow_admin", true);
	bool		sees_all = OidIsValid(admin) && has_privs_of_role(me, admin);
	int			n;
	JfCircuitShared *all;
	int			i;

	jf_init_materialized_srf(fcinfo);
	all = jf_published_circuits(&n);
	for (i = 0; i < n; i++)
	{
		JfCircuitShared *c = &all[i];
		Datum		values[7];
		bool		nulls[7] = {false};

		/* a role dropped since: nobody's to see but the admins' */
		if (!sees_all && !has_privs_of_role(me, c->owner))
			continue;
		values[0] = ObjectIdGetDatum(c->owner);
		values[1] = CStringGetTextDatum(c->origin);
		values[2] = CStringGetTextDatum(jf_circuit_state_name(c->state));
		values[3] = TimestampTzGetDatum(ms_to_ts(c->since_ms));
		values[4] = Int32GetDatum(c->failures);
		values[5] = Int64GetDatum(c->held);
		if (c->next_probe_ms > 0)
			values[6] = TimestampTzGetDatum(ms_to_ts(c->next_probe_ms));
		else
			nulls[6] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(all);
	PG_RETURN_VOID();
}

/*
 * Whether a text given may be quoted back in an error: short, and no
 * control character (a line feed would forge a line of the server log).
 */
static bool
printable(const char *s)
{
	if (strlen(s) > 100)
		return false;
	for (; *s; s++)
		if ((unsigned char) *s < 0x20 || (unsigned char) *s == 0x7f)
			return false;
	return true;
}

/*
 * Resets of one owner (InvalidOid: administrators' of every owner)
 * waiting in a slot at once, at most: a tenant calling reset_circuit() in
 * a loop takes a quarter of the places, never those of the others.  A
 * reset without a place waits for one, up to RESET_WAIT_MS.
 */
#define RESETS_PER_OWNER (JF_CIRCUIT_RESETS / 4)
#define RESET_WAIT_MS 5000
#define RESET_WAIT_STEP_MS 10

/*
 * Post a reset into the slot of a worker; true when posted, or nothing to
 * post (no worker, or the same reset is waiting already); false while the
 * slot, or owner's share of it, is full.
 */
static bool
post_reset(JfSlot *s, Oid owner, const char *origin)
{
	bool		done = true;

	SpinLockAcquire(&s->mutex);
	if (s->dboid == MyDatabaseId && s->worker_pid != 0)	/* else no circuit either */
	{
		int			n = Min(Max(s->ncircuit_resets, 0), JF_CIRCUIT_RESETS);
		int			mine = 0;
		bool		same = false;

		for (int i = 0; i < n; i++)
			if (s->circuit_resets[i].owner == owner)
			{
				mine++;
				same |= strcmp(s->circuit_resets[i].origin, origin) == 0;
			}
		if (same)
			;
		else if (mine < RESETS_PER_OWNER && n < JF_CIRCUIT_RESETS)
		{
			JfCircuitReset *r = &s->circuit_resets[n];

			r->owner = owner;
			strlcpy(r->origin, origin, sizeof(r->origin));
			s->ncircuit_resets = n + 1;
		}
		else
			done = false;
	}
	SpinLockRelease(&s->mutex);
	return done;
}

/*
 * jobflow.reset_circuit(origin text, owner regrole DEFAULT NULL) RETURNS
 * void: close the circuits of origin (a URL or scheme://host[:port]) of
 * owner, at once: its held tasks go under the usual limits.  owner NULL is
 * the caller's own, or, for members of jobflow_admin, every owner's.  A
 * tenant may close its own circuits only (the check of jf_managed_role):
 * it can neither release nor hold another tenant's tasks.  The workers do
 * it at their next turn; the next failures count from zero.
 */
PG_FUNCTION_INFO_V1(jobflow_reset_circuit);
Datum
jobflow_reset_circuit(PG_FUNCTION_ARGS)
{
	Oid			me = GetUserId();
	Oid			admin = get_role_oid("jobflow_admin", true);
	Oid			owner;
	char	   *given;
	char		origin[JF_METRICS_ORIGIN_MAX];
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	int			part;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the origin of a circuit cannot be null"),
				 errhint("Name the origin as jobflow.endpoints shows it, such as https://example.com:443.")));
	if (PG_ARGISNULL(1) && OidIsValid(admin) && has_privs_of_role(me, admin))
		owner = InvalidOid;
	else
		owner = jf_managed_role(fcinfo, 1, "reset the circuits of");
	given = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (!jf_fair_origin(given, origin, sizeof(origin)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 printable(given) ? errmsg("\"%s\" is not an origin", given) :
				 errmsg("the text given is not an origin"),
				 errhint("Name the origin as jobflow.endpoints shows it, such as https://example.com:443, or give a URL of it.")));

	(void) jf_db_slots(MyDatabaseId, slots);
	for (part = 0; part < jobflow_workers_per_database; part++)
	{
		JfSlot	   *s = slots[part];
		int			waited_ms = 0;

		if (s == NULL)
			continue;
		while (!post_reset(s, owner, origin))
		{
			/* the worker takes them at its next turn: wait for a place */
			jf_slot_wake(s, MyDatabaseId);
			if (waited_ms >= RESET_WAIT_MS)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("too many circuit resets are waiting for the jobflow worker"),
						 errhint("Try again in a moment: the worker takes them at its next turn.")));
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 RESET_WAIT_STEP_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			waited_ms += RESET_WAIT_STEP_MS;
		}
		jf_slot_wake(s, MyDatabaseId);
	}
	PG_RETURN_VOID();
}
