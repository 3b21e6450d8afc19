/*-------------------------------------------------------------------------
 *
 * circuits.h
 *	  The circuits the workers publish, read by SQL (circuits.c):
 *	  jobflow.endpoints, jobflow.reset_circuit(), the metrics' gauge and
 *	  explain()'s reason.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_API_CIRCUITS_H
#define JOBFLOW_API_CIRCUITS_H

#include "base/metrics.h"

/* Every running worker's published circuits; palloc'd, *n of them. */
extern JfCircuitShared *jf_published_circuits(int *n);

/* The circuit of (owner, origin) if a worker published one: into *out. */
extern bool jf_circuit_of(Oid owner, const char *origin, JfCircuitShared *out);

/* Open (or half-open) circuits of the database, all of them. */
extern int	jf_circuits_open_total(void);

/* "closed", "open", "half_open" */
extern const char *jf_circuit_state_name(int32 state);

#endif							/* JOBFLOW_API_CIRCUITS_H */
