/*-------------------------------------------------------------------------
 *
 * schema_version.c
 *	  Whether the installed jobflow schema is the one this library needs.
 *
 * After the library is upgraded (a new package and a restart), the
 * database keeps the old schema until someone runs ALTER EXTENSION jobflow
 * UPDATE.  The worker must not run its statements against the old schema:
 * it waits, as it does before CREATE EXTENSION, and says once what to run.
 * The update script ends with NOTIFY jobflow, which wakes it; its wait
 * also times out and checks again.  Tasks stay in the table meanwhile and
 * fire once the worker resumes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "worker/schema_version.h"
#include "base/settings.h"
#include "launcher/slots.h"

/* extversion of jobflow in this database, palloc'd; NULL when absent */
static char *
installed_version(void)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("jobflow"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * In a transaction: whether jobflow is installed here at the version this
 * library was built for, older, or not at all.  Logs, once per state and process, why
 * the worker waits and what to run.
 */
JfSchemaState
jf_schema_state(void)
{
	static JfSchemaState logged = JF_SCHEMA_READY;
	JfSchemaState state;
	char	   *version = installed_version();
	char	   *dbname = get_database_name(MyDatabaseId);

	if (version == NULL)
		state = JF_SCHEMA_ABSENT;
	else if (strcmp(version, JOBFLOW_VERSION) != 0)
		state = JF_SCHEMA_OUTDATED;
	else
		state = JF_SCHEMA_READY;

	if (state != logged && state == JF_SCHEMA_ABSENT)
		ereport(LOG,
				(errmsg("jobflow worker finds no extension jobflow in database \"%s\"",
						dbname)));
	else if (state != logged && state == JF_SCHEMA_OUTDATED)
		ereport(WARNING,
				(errmsg("jobflow worker waiting: database \"%s\" has jobflow %s, this library needs %s",
						dbname, version, JOBFLOW_VERSION),
				 errdetail("No task is fired until the schema is updated; tasks are kept."),
				 errhint("Run ALTER EXTENSION jobflow UPDATE in database \"%s\".",
						 dbname)));
	logged = state;
	return state;
}
