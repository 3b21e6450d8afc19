/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The entry point of jobflow's background worker (worker.c), which the
 *	  launcher registers by name.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_WORKER_H
#define JOBFLOW_WORKER_H

#include "postgres.h"

extern PGDLLEXPORT void jobflow_worker_main(Datum main_arg);

#endif							/* JOBFLOW_WORKER_H */
