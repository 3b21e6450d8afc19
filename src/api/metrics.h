/*-------------------------------------------------------------------------
 *
 * metrics.h
 *	  What other SQL-callable code reads of the figures api/metrics.c
 *	  shows: the load of the busiest origins, as the workers published it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_API_METRICS_H
#define JOBFLOW_API_METRICS_H

#include "postgres.h"

#include "base/metrics.h"

/*
 * The busiest origins of this database (at most JF_METRICS_TOP, busiest
 * first), each origin's requests in flight and queued added up over the
 * workers that send to it; none while no worker runs.
 */
extern int	jf_busiest_origins(JfHostShared *out);

#endif							/* JOBFLOW_API_METRICS_H */
