/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher that starts one jobflow worker per database having the
 *	  extension (launcher.c).  The slots it assigns are slots.h's; what
 *	  backends tell it from the utility hook is hook.h's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LAUNCHER_H
#define JOBFLOW_LAUNCHER_H

#include "postgres.h"

/* _PG_init: the launcher's registration */
extern void jf_launcher_register(void);

extern PGDLLEXPORT void jobflow_launcher_main(Datum main_arg);
extern PGDLLEXPORT void jobflow_probe_main(Datum main_arg);

#endif							/* JOBFLOW_LAUNCHER_H */
