/*-------------------------------------------------------------------------
 *
 * drops.h
 *	  What DROP EXTENSION, DROP ROLE, DROP OWNED and REASSIGN OWNED do to
 *	  jobflow's rows (drops.c), called from the utility hook.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_DROPS_H
#define JOBFLOW_DROPS_H

#include "postgres.h"

#include "nodes/pg_list.h"

/* the roles a statement names, noted before it runs */
typedef struct JfDropsNoted
{
	List	   *oids;
	List	   *names;
} JfDropsNoted;

extern void jf_drops_utility_before(Node *parsetree, JfDropsNoted *noted);
extern void jf_drops_utility_after(Node *parsetree, JfDropsNoted *noted);

#endif							/* JOBFLOW_DROPS_H */
