/*-------------------------------------------------------------------------
 *
 * rate.h
 *	  A dispatch rate: how many requests may go now, so that a named
 *	  queue's max_per_second and the per-origin rate are smooth and never
 *	  exceeded.
 *
 * Two rules hold together:
 *
 *	- pace: a token bucket.  Tokens accrue continuously; an idle rate keeps
 *	  at most one token plus 5 ms' worth, so sending is smooth, never a
 *	  burst at each second boundary.  While tasks wait for tokens it keeps
 *	  up to 100 ms' worth, so that a late turn (a claim's commit, a flush
 *	  of outcomes) sends what the rate allowed meanwhile; what a turn later
 *	  than that would lose is owed and paid back at up to 1.5 times the
 *	  rate, so a late turn does not lower the rate in the long run.
 *
 *	- ceiling: whatever the pace allows, no window of one second (of one
 *	  request's interval, for rates under one a second) holds more than the
 *	  rate's worth, rounded up.  An endpoint limited to 100 requests a
 *	  second never gets 101 from a 100/s queue, not even while the
 *	  worker catches up after the machine stalled it.  The window is
 *	  counted in JF_RATE_SLOTS slots, with the time of each slot's last
 *	  request, so a steady rate is held exactly.
 *
 * A zeroed JfRate is ready; jf_rate_free() releases what it holds.  Plain
 * C, no PostgreSQL headers (unit-tested through test/unit/test_fair.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_RATE_H
#define JF_RATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JF_RATE_SLOTS 200

typedef struct JfRate
{
	double		rate;			/* the rate it was started for */
	double		tokens;
	double		owed;			/* tokens the cap held back while tasks waited */
	int64_t		last;			/* when tokens was last brought up to date */
	bool		started;
	bool		backlog;		/* tasks were left waiting at the last spend */
	bool		held;			/* the window held tokens back at the last look */
	/* the ceiling's window: requests sent in each slot, newest at `slot` */
	uint32_t   *sent;			/* JF_RATE_SLOTS + 1 counts, a ring */
	int64_t    *latest;			/* when each slot's last one went */
	int64_t		slot;
	int64_t		slot_us;
	int64_t		window_us;
	int64_t		now;			/* of the last jf_rate_room */
	uint32_t	in_window;		/* sent in all slots of the ring */
	uint32_t	ceiling;
} JfRate;

/*
 * How many requests may go at now (0 to INT_MAX); with none, lowers
 * *deadline to when the next one may.
 */
extern int	jf_rate_room(JfRate *r, double rate, int64_t now, int64_t *deadline);

/*
 * n requests went at the now of the last jf_rate_room; waiting: tasks this
 * rate could have sent are still waiting (it may then keep what it is owed).
 */
extern void jf_rate_spend(JfRate *r, int n, bool waiting);

/* Forgetting r (jf_rate_free) now would lose nothing it enforces. */
extern bool jf_rate_idle(const JfRate *r, int64_t now);
extern size_t jf_rate_memory(const JfRate *r);
extern void jf_rate_free(JfRate *r);

#endif							/* JF_RATE_H */
