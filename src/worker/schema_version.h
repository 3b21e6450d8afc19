/*-------------------------------------------------------------------------
 *
 * schema_version.h
 *	  Whether the installed jobflow schema is the one this library needs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_SCHEMA_VERSION_H
#define JOBFLOW_SCHEMA_VERSION_H

typedef enum JfSchemaState
{
	JF_SCHEMA_ABSENT,			/* no CREATE EXTENSION yet */
	JF_SCHEMA_OUTDATED,			/* an older version: UPDATE to come */
	JF_SCHEMA_READY				/* the version of this library */
} JfSchemaState;

extern JfSchemaState jf_schema_state(void);

#endif							/* JOBFLOW_SCHEMA_VERSION_H */
