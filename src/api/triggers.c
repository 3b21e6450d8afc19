/*-------------------------------------------------------------------------
 *
 * triggers.c
 *	  What every trigger function of jobflow checks first: that it is fired
 *	  as it was declared, on the table it was written for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "api/triggers.h"

/*
 * The trigger functions read columns by name and keep per-relation state:
 * attached to any other table, or at another timing, they would fail in
 * ways that look like bugs (XX000) or announce rows that are no tasks.
 * Only a superuser can get that far (EXECUTE is revoked from everyone
 * else, and SQL refuses a direct call of a trigger function), but the
 * answer is still a clear error.
 */
void
jf_require_trigger(FunctionCallInfo fcinfo, const char *funcname,
				   bool before, bool row, const char *relname)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	static Oid	checked[3] = {InvalidOid, InvalidOid, InvalidOid};	/* tasks,
																		 * cron_timers,
																		 * queues */
	Oid		   *known;
	Relation	rel;
	char	   *nspname;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager", funcname)));
	if ((before ? !TRIGGER_FIRED_BEFORE(trigdata->tg_event) :
		 !TRIGGER_FIRED_AFTER(trigdata->tg_event)) ||
		(row ? !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) :
		 !TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired %s %s", funcname,
						before ? "BEFORE" : "AFTER", row ? "for each row" : "for each statement")));
	/* once per relation: the row triggers run for every row of a COPY */
	rel = trigdata->tg_relation;
	known = &checked[strcmp(relname, "tasks") == 0 ? 0 :
					 strcmp(relname, "cron_timers") == 0 ? 1 : 2];
	if (RelationGetRelid(rel) == *known)
		return;
	nspname = get_namespace_name(RelationGetNamespace(rel));
	if (nspname == NULL || strcmp(nspname, "jobflow") != 0 ||
		strcmp(RelationGetRelationName(rel), relname) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" can only be fired on jobflow.%s", funcname, relname),
				 errdetail("It is internal to jobflow.")));
	*known = RelationGetRelid(rel);
}
