/*-------------------------------------------------------------------------
 *
 * drops.c
 *	  What DROP EXTENSION, DROP ROLE, DROP OWNED and REASSIGN OWNED do to
 *	  jobflow's tasks, timers, queues and secrets.
 *
 * The library is preloaded in every backend, so the utility hook
 * (jobflow.c) sees every utility statement of the cluster and calls in
 * here, before and after each:
 *
 *	- DROP EXTENSION jobflow is refused while tasks are pending or running
 *	  or timers active, unless CASCADE (which then says what it drops);
 *	- DROP ROLE is refused (2BP01) while the role owns such tasks or timers
 *	  in the current database, and otherwise deletes its configured
 *	  queues, secrets and signing secrets there; DROP OWNED BY cancels the
 *	  role's pending tasks and deletes its timers, queues, secrets and
 *	  signing secrets; REASSIGN OWNED BY moves its tasks, log rows, timers
 *	  and queues to the new role, and deletes its secrets and signing
 *	  secrets (the new role never gave those values).
 *
 * A role may be dropped from another database, where these tables cannot
 * be seen: the roles dropped are published at commit for the workers of
 * every database (launcher/dropped_roles.c), whose sweep cleans up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "api/drops.h"
#include "api/tenant_api.h"
#include "base/locks.h"
#include "launcher/dropped_roles.h"

typedef struct AsOwner
{
	Oid			save_user;
	int			save_sec;
	int			nest;
} AsOwner;

/* The owner of the extension whose OID is ext. */
static Oid
extension_owner(Oid ext)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Oid			owner = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/*
 * Run the statements that follow as the extension's owner (row-level
 * security and column privileges are for tenants, not for these
 * bookkeeping statements), with a pinned search_path, and with triggers
 * off when replica is set.  False when jobflow is not installed here.
 */
static bool
as_owner_begin(AsOwner *s, bool replica)
{
	bool		isnull;
	Oid			owner;

	if (!OidIsValid(get_extension_oid("jobflow", true)))
		return false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT e.extowner FROM pg_catalog.pg_extension e"
					" WHERE e.extname OPERATOR(pg_catalog.=) 'jobflow'", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not read the owner of extension jobflow");
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	GetUserIdAndSecContext(&s->save_user, &s->save_sec);
	SetUserIdAndSecContext(owner, s->save_sec | SECURITY_LOCAL_USERID_CHANGE);
	s->nest = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (replica)
		(void) set_config_option("session_replication_role", "replica", PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	return true;
}

static void
as_owner_end(AsOwner *s)
{
	AtEOXact_GUC(true, s->nest);
	SetUserIdAndSecContext(s->save_user, s->save_sec);
	SPI_finish();
}

static int64
count_of(const char *sql, Oid role)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(role)};
	bool		isnull;

	if (SPI_execute_with_args(sql, OidIsValid(role) ? 1 : 0, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "counting jobflow tasks failed");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

#define COUNT_UNFINISHED \
	"SELECT pg_catalog.count(*) FROM jobflow.tasks t" \
	" WHERE t.state OPERATOR(pg_catalog.=) ANY ('{pending,running}')"
#define COUNT_ACTIVE_TIMERS \
	"SELECT pg_catalog.count(*) FROM jobflow.cron_timers c WHERE c.active"
#define OF_ROLE(col) " AND " col "::pg_catalog.oid OPERATOR(pg_catalog.=) $1"

/*
 * DROP EXTENSION jobflow: tasks that have not run and active timers would
 * go without a trace; refuse unless CASCADE, and say what CASCADE drops.
 */
static void
check_drop_extension(DropStmt *stmt)
{
	AsOwner		s;
	int64		unfinished;
	int64		timers;
	Oid			ext = get_extension_oid("jobflow", true);

	/*
	 * A role that may not drop it learns nothing: PostgreSQL refuses it
	 * next, and the counts are every tenant's.
	 */
	if (!OidIsValid(ext) || !has_privs_of_role(GetUserId(), extension_owner(ext)))
		return;
	/* the worker's transactions finish first, and the next ones wait */
	jf_lock_serving(AccessExclusiveLock);
	if (!as_owner_begin(&s, false))
		return;
	unfinished = count_of(COUNT_UNFINISHED, InvalidOid);
	timers = count_of(COUNT_ACTIVE_TIMERS, InvalidOid);
	as_owner_end(&s);
	if (unfinished == 0 && timers == 0)
		return;
	if (stmt->behavior != DROP_CASCADE)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop extension jobflow because it has tasks that have not run"),
				 errdetail("Dropping it would lose %lld pending or running task(s) and %lld active cron timer(s) in database \"%s\".",
						   (long long) unfinished, (long long) timers,
						   get_database_name(MyDatabaseId)),
				 errhint("Cancel the tasks and pause the timers first, or use DROP EXTENSION jobflow CASCADE to drop them with it.")));
	ereport(WARNING,
			(errmsg("dropping %lld pending or running task(s) and %lld active cron timer(s) with extension jobflow",
					(long long) unfinished, (long long) timers),
			 errdetail("Their callbacks will not be made.")));
}

static bool
drops_jobflow(DropStmt *stmt)
{
	ListCell   *lc;

	if (stmt->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, stmt->objects)
	{
		if (strcmp(strVal(lfirst(lc)), "jobflow") == 0)
			return true;
	}
	return false;
}

/* Oids of the roles named (those that exist). */
static List *
role_oids(List *specs)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, specs)
	{
		Oid			oid = get_rolespec_oid((RoleSpec *) lfirst(lc), true);

		if (OidIsValid(oid))
			oids = lappend_oid(oids, oid);
	}
	return oids;
}

/* The roles' oids as an oid[] Datum. */
static Datum
oid_array(List *oids)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(list_length(oids), 1));
	ListCell   *lc;
	int			n = 0;

	foreach(lc, oids)
		d[n++] = ObjectIdGetDatum(lfirst_oid(lc));
	return PointerGetDatum(construct_array(d, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
}

/*
 * Delete the roles' secrets, signing secrets and client certificates,
 * and (but for REASSIGN OWNED, which moves them) their configured
 * queues, in the tables this version of the schema has.  As the extension's owner (as_owner_begin),
 * with triggers on: the worker hears of the queues.
 */
static void
delete_of_roles(List *oids, bool keep_queues)
{
	static const char *const tables[] = {"secrets", "signing_secrets", "client_certificates",
	"queues"};
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1] = {oid_array(oids)};
	Oid			nsp = get_namespace_oid("jobflow", false);
	int			i;

	for (i = 0; i < lengthof(tables) - (keep_queues ? 1 : 0); i++)
	{
		if (!OidIsValid(get_relname_relid(tables[i], nsp)))
			continue;
		if (SPI_execute_with_args(psprintf("DELETE FROM jobflow.%s x"
										   " WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
										   tables[i]),
								  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "deleting from jobflow.%s for dropped roles failed", tables[i]);
	}
}

/*
 * After DROP ROLE (in this transaction): refuse if a dropped role owns
 * tasks that have not run or active timers here.  Checked after the drop,
 * so that its own privilege checks come first.
 */
static void
check_dropped_roles(List *oids, List *names)
{
	AsOwner		s;
	ListCell   *lo;
	ListCell   *ln;

	if (oids == NIL || !as_owner_begin(&s, false))
		return;
	forboth(lo, oids, ln, names)
	{
		Oid			role = lfirst_oid(lo);
		int64		unfinished = count_of(COUNT_UNFINISHED OF_ROLE("t.owner"), role);
		int64		timers = count_of(COUNT_ACTIVE_TIMERS OF_ROLE("c.owner"), role);

		if (unfinished > 0 || timers > 0)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because it owns jobflow tasks that have not run",
							(char *) lfirst(ln)),
					 errdetail("It owns %lld pending or running task(s) and %lld active cron timer(s) in database \"%s\".",
							   (long long) unfinished, (long long) timers,
							   get_database_name(MyDatabaseId)),
					 errhint("Move them to another role with REASSIGN OWNED BY, or cancel them with DROP OWNED BY, before dropping the role.")));
	}
	/* what the role configured and kept secret goes with it */
	delete_of_roles(oids, false);
	as_owner_end(&s);
}

/*
 * DROP OWNED BY: cancel the roles' pending tasks, delete their timers,
 * configured queues, secrets and signing secrets.
 */
static void
drop_owned(List *oids)
{
	AsOwner		s;
	Oid			types[1] = {OIDARRAYOID};
	Datum		values[1];

	if (oids == NIL || !as_owner_begin(&s, false))
		return;
	values[0] = oid_array(oids);
	if (SPI_execute_with_args(
			"DELETE FROM jobflow.cron_timers c"
			" WHERE c.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
			1, types, values, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args(
			"UPDATE jobflow.tasks t SET state = 'cancelled',"
			"       last_error = 'cancelled: DROP OWNED BY its role',"
			"       updated_at = pg_catalog.now()"
			" WHERE t.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
			"   AND t.state OPERATOR(pg_catalog.=) 'pending'",
			1, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "DROP OWNED BY on jobflow's tables failed");
	delete_of_roles(oids, false);
	as_owner_end(&s);
}

/*
 * REASSIGN OWNED BY, first part, with triggers on (the worker hears of
 * the queues): the roles' configured queues move to the new role, but for
 * the names it configured itself, whose configuration stays (and, of two
 * old roles' queues of one name, the one of the lower oid moves).  Their
 * secrets and signing secrets are deleted, not moved: a role gave them
 * for its own callbacks, and the new role never gave those values.
 */
static void
reassign_queues_and_secrets(List *oids, Oid newrole)
{
	AsOwner		s;
	Oid			types[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2];
	List	   *old = NIL;
	ListCell   *lc;

	/* REASSIGN OWNED BY r TO r moves nothing */
	foreach(lc, oids)
		if (lfirst_oid(lc) != newrole)
			old = lappend_oid(old, lfirst_oid(lc));
	if (old == NIL || !as_owner_begin(&s, false))
		return;
	delete_of_roles(old, true);
	if (OidIsValid(get_relname_relid("queues", get_namespace_oid("jobflow", false))))
	{
		values[0] = oid_array(old);
		values[1] = ObjectIdGetDatum(newrole);
		if (SPI_execute_with_args(
				"DELETE FROM jobflow.queues x"
				" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
				"   AND EXISTS (SELECT 1 FROM jobflow.queues y"
				"                WHERE y.name OPERATOR(pg_catalog.=) x.name"
				"                  AND (y.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $2"
				"                       OR (y.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
				"                           AND y.owner::pg_catalog.oid OPERATOR(pg_catalog.<) x.owner::pg_catalog.oid)))",
				2, types, values, NULL, false, 0) != SPI_OK_DELETE ||
			SPI_execute_with_args(
				"UPDATE jobflow.queues x SET owner = $2::pg_catalog.regrole,"
				"       updated_at = pg_catalog.now()"
				" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
				2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "REASSIGN OWNED BY on jobflow.queues failed");
	}
	as_owner_end(&s);
}

/*
 * REASSIGN OWNED BY: tasks (finished ones too), their log rows and timers
 * move to the new role, as its other objects do, unless the new role is
 * one every tenant holds (a tenant may REASSIGN OWNED BY itself TO
 * jobflow_user).  Triggers are off: the owner of a finished task changes,
 * nothing else.
 */
static void
reassign_owned(List *oids, Oid newrole)
{
	AsOwner		s;
	Oid			types[2] = {OIDARRAYOID, OIDOID};
	Datum		values[2];
	int			n;
	/*
	 * Timers first: their UPDATE waits for a cron pass that holds them
	 * (it locks the timers it materialises), and each later statement
	 * takes a new snapshot, so the occurrences that pass created under the
	 * old owner move too.  From then on the pass skips the locked timers.
	 */
	static const char *const sql[] = {
		"UPDATE jobflow.cron_timers x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
		"UPDATE jobflow.tasks x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)",
		"UPDATE jobflow.task_log x SET owner = $2::pg_catalog.regrole"
		" WHERE x.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1)"
	};

	/* a role every tenant holds takes nothing (issue 20, item 4) */
	if (oids != NIL && OidIsValid(get_extension_oid("jobflow", true)))
		jf_check_owner_role(newrole);
	reassign_queues_and_secrets(oids, newrole);
	if (oids == NIL || !as_owner_begin(&s, true))
		return;
	values[0] = oid_array(oids);
	values[1] = ObjectIdGetDatum(newrole);
	for (n = 0; n < lengthof(sql); n++)
	{
		if (SPI_execute_with_args(sql[n], 2, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "REASSIGN OWNED BY on jobflow's tables failed");
	}
	as_owner_end(&s);
}

/*
 * The utility hook, before a statement: DROP EXTENSION jobflow is checked,
 * and the roles a DROP ROLE, DROP OWNED or REASSIGN OWNED names are noted
 * (after it they may be gone).
 */
void
jf_drops_utility_before(Node *parsetree, JfDropsNoted *noted)
{
	noted->oids = NIL;
	noted->names = NIL;
	switch (nodeTag(parsetree))
	{
		case T_DropStmt:
			if (drops_jobflow((DropStmt *) parsetree))
				check_drop_extension((DropStmt *) parsetree);
			break;
		case T_DropRoleStmt:
			{
				ListCell   *lc;

				foreach(lc, ((DropRoleStmt *) parsetree)->roles)
				{
					RoleSpec   *spec = (RoleSpec *) lfirst(lc);
					Oid			oid = get_rolespec_oid(spec, true);

					if (OidIsValid(oid))
					{
						noted->oids = lappend_oid(noted->oids, oid);
						noted->names = lappend(noted->names, pstrdup(get_rolespec_name(spec)));
					}
				}
			}
			break;
		case T_DropOwnedStmt:
			noted->oids = role_oids(((DropOwnedStmt *) parsetree)->roles);
			break;
		case T_ReassignOwnedStmt:
			noted->oids = role_oids(((ReassignOwnedStmt *) parsetree)->roles);
			break;
		default:
			break;
	}
}

/* ... and after it: what the roles it dropped or emptied leave here. */
void
jf_drops_utility_after(Node *parsetree, JfDropsNoted *noted)
{
	switch (nodeTag(parsetree))
	{
		case T_DropRoleStmt:
			check_dropped_roles(noted->oids, noted->names);
			/* the workers of every database look for them at commit */
			jf_dropped_roles_publish(noted->oids);
			break;
		case T_DropOwnedStmt:
			drop_owned(noted->oids);
			break;
		case T_ReassignOwnedStmt:
			reassign_owned(noted->oids,
						   get_rolespec_oid(((ReassignOwnedStmt *) parsetree)->newrole, false));
			break;
		default:
			break;
	}
}
