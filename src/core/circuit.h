/*-------------------------------------------------------------------------
 *
 * circuit.h
 *	  Circuits per (owner, origin): an origin that keeps failing for an
 *	  owner is left alone, but for one probe at growing intervals.
 *
 * After `failures` consecutive failures (a connection that failed, a
 * timeout, a 5xx) of one owner's requests to one origin, within `window`
 * of the first of them, the circuit of (owner, origin) opens: the fair
 * share claims none of that owner's due tasks for that origin (they stay
 * parked, no attempt spent), but for one probe, a real due task, once
 * `probe_min` has passed, then twice that after each failed probe, up to
 * `probe_max`.  A success, of the probe or of any request of that owner to
 * that origin, closes it.
 *
 * Keyed per (owner, origin), not per origin: one tenant's requests that
 * fail (its paths answer 5xx, its slow endpoint times out) never hold
 * another tenant's tasks to the same origin.
 *
 * Plain C, no PostgreSQL headers (unit-tested in test/unit/core/test_circuit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_CIRCUIT_H
#define JF_CIRCUIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct JfCircuits JfCircuits;

typedef enum JfCircuitState
{
	JF_CIRCUIT_CLOSED,
	JF_CIRCUIT_OPEN,
	JF_CIRCUIT_HALF_OPEN		/* a probe is in flight */
} JfCircuitState;

/* What one result says of its origin. */
typedef enum JfCircuitResult
{
	JF_CIRCUIT_NEUTRAL,			/* says nothing (a 429, a refused address) */
	JF_CIRCUIT_SUCCESS,			/* the origin answered */
	JF_CIRCUIT_FAILURE			/* connection, timeout, TLS, DNS, 5xx */
} JfCircuitResult;

typedef struct JfCircuitConfig
{
	int			failures;		/* consecutive failures that open; 0: off */
	int64_t		window_ms;		/* ... counted from the first of them */
	int64_t		probe_min_ms;	/* first probe after opening */
	int64_t		probe_max_ms;	/* longest interval between probes */
} JfCircuitConfig;

/* One circuit as jf_circuits_list() shows it. */
typedef struct JfCircuitInfo
{
	uint32_t	owner;
	const char *origin;			/* valid until the next call that changes */
	JfCircuitState state;
	int64_t		since_ms;		/* when it entered its state (closed: the
								 * first failure counted) */
	int			failures;		/* consecutive failures counted */
	int64_t		next_probe_ms;	/* open: when the next probe may go */
} JfCircuitInfo;

extern JfCircuits *jf_circuits_create(const JfCircuitConfig *cfg);
extern void jf_circuits_destroy(JfCircuits *c);

/* New settings; turned off (failures 0), every circuit is forgotten. */
extern void jf_circuits_set_config(JfCircuits *c, const JfCircuitConfig *cfg);

/*
 * How many of (owner, origin)'s due tasks may be claimed now: -1 for no
 * limit (closed, or unknown), 0 while open (or a probe is out), 1 when a
 * probe may go.  Cheap when no circuit is known.
 */
extern int	jf_circuits_room(JfCircuits *c, uint32_t owner, const char *origin,
							 int64_t now_ms);

/* Task id was picked for (owner, origin) within the room given: a probe. */
extern void jf_circuits_taken(JfCircuits *c, uint32_t owner, const char *origin,
							  uint64_t id, int64_t now_ms);

/*
 * The result of a request of (owner, origin), task id.  Returns true when
 * the circuit's state changed (closed -> open, half-open -> open is not a
 * change of state shown, half-open -> closed, open -> closed).
 */
extern bool jf_circuits_result(JfCircuits *c, uint32_t owner, const char *origin,
							   uint64_t id, JfCircuitResult r, int64_t now_ms);

/*
 * Task id of (owner, origin) was picked but not sent (cancelled, not
 * claimed, handed back): if it was the probe, another may go at once.
 */
extern void jf_circuits_unsent(JfCircuits *c, uint32_t owner, const char *origin,
							   uint64_t id, int64_t now_ms);

/*
 * Close the circuits of origin: of owner, or of every owner when owner is
 * 0.  Returns how many were open (or half-open), and the owners of the
 * first max of them in closed[].
 */
extern int	jf_circuits_reset(JfCircuits *c, uint32_t owner, const char *origin,
							  uint32_t *closed, int max);

/*
 * The earliest time after now_ms an open circuit may send a probe
 * (INT64_MAX: none), for the worker's sleep.  A probe time already passed
 * is not one: the circuit lets a probe go as soon as a task is due, and
 * the loop must not spin while none is.
 */
extern int64_t jf_circuits_next_probe(const JfCircuits *c, int64_t now_ms);

/*
 * Up to max circuits, those not closed first, then closed ones that count
 * failures; forgets closed ones whose failures are older than the window.
 * When there are more than max, they are shared out among the owners
 * (every owner's first, then every owner's second, ..., each owner's open
 * ones before its others): one owner's many circuits never hide another's
 * few.  Returns how many were written.
 */
extern int	jf_circuits_list(JfCircuits *c, JfCircuitInfo *out, int max, int64_t now_ms);

extern int	jf_circuits_open(const JfCircuits *c);	/* open or half-open */
extern size_t jf_circuits_count(const JfCircuits *c);

#endif							/* JF_CIRCUIT_H */
