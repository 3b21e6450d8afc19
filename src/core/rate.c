/*-------------------------------------------------------------------------
 *
 * rate.c
 *	  A dispatch rate: a token bucket for pace under a sliding window's
 *	  ceiling (see rate.h).
 *
 * The bucket alone kept the pace but not the ceiling: after a stall of the
 * worker it paid back what it owed at 1.5 times the rate, and a CI run on
 * a machine whose host took its CPUs away sent 132 requests within one
 * second from a 100/s queue.  The window counts what went in each of the
 * last JF_RATE_SLOTS slots plus the current one, and when each slot's
 * last request went: a request goes only if the window of one second
 * ending now holds fewer than the ceiling.  What the bucket owes is then paid back into the room a stall
 * left in the window, never beyond it.
 *
 *-------------------------------------------------------------------------
 */
#include "core/rate.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* a bucket keeps one token plus this many seconds' worth of them */
#define BURST_SECONDS 0.005
/* ... or, while tasks wait for its tokens, this many (a late turn's due) */
#define CATCHUP_SECONDS 0.1
/* tokens owed beyond that are paid back at this share of the rate, on top of it */
#define CATCHUP_FACTOR 0.5

#define RING (JF_RATE_SLOTS + 1)

/*
 * A rate set anew starts with one token and an empty window: its window is
 * one second, or one request's interval for rates under one a second.
 */
static bool
rate_start(JfRate *r, double rate, int64_t now)
{
	double		ceiling = rate >= 1.0 ? rate : 1.0;

	/* a window over a day long is never needed (nor representable for tiny rates) */
	if (rate < 1e-5)
		rate = 1e-5;
	if (r->sent == NULL)
	{
		r->sent = calloc(RING, sizeof(uint32_t));
		r->latest = calloc(RING, sizeof(int64_t));
		if (r->sent == NULL || r->latest == NULL)
		{
			jf_rate_free(r);
			return false;
		}
	}
	else
		memset(r->sent, 0, RING * sizeof(uint32_t));
	r->started = true;
	r->backlog = false;
	r->rate = rate;
	r->tokens = 1.0;
	r->owed = 0.0;
	r->last = now;
	r->window_us = rate >= 1.0 ? 1000000 : (int64_t) (1e6 / rate);
	/* rounded up: the ring covers at least the window */
	r->slot_us = (r->window_us + JF_RATE_SLOTS - 1) / JF_RATE_SLOTS;
	r->slot = now / r->slot_us;
	r->in_window = 0;
	/* rounded up, but 100.0 stays 100 */
	r->ceiling = (uint32_t) ceiling;
	if ((double) r->ceiling < ceiling - 1e-9)
		r->ceiling++;
	return true;
}

/* Slide the ring to now's slot: the slots it leaves count no more. */
static void
window_advance(JfRate *r, int64_t now)
{
	int64_t		s = now / r->slot_us;

	if (s <= r->slot)
		return;
	if (s - r->slot >= RING)
	{
		memset(r->sent, 0, RING * sizeof(uint32_t));
		r->in_window = 0;
	}
	else
	{
		for (int64_t j = r->slot + 1; j <= s; j++)
		{
			r->in_window -= r->sent[j % RING];
			r->sent[j % RING] = 0;
		}
	}
	r->slot = s;
}

/*
 * Requests in the window ending at now.  Only slots that began before the
 * window (the ring's oldest one or two) can hold requests from before it:
 * such a slot counts unless its last request is out, and then all of it
 * is, so a steady rate is never held below itself.
 */
static uint32_t
window_count(const JfRate *r, int64_t now)
{
	uint32_t	n = r->in_window;

	for (int64_t j = r->slot - JF_RATE_SLOTS;
		 j <= r->slot && j * r->slot_us <= now - r->window_us; j++)
	{
		int64_t		k = ((j % RING) + RING) % RING;

		if (j >= 0 && r->sent[k] > 0)
		{
			if (r->latest[k] > now - r->window_us)
				break;
			n -= r->sent[k];
		}
	}
	return n;
}

/* When the window has room again, full at now: its oldest request leaves. */
static int64_t
window_frees_at(const JfRate *r, int64_t now)
{
	for (int64_t j = r->slot - JF_RATE_SLOTS; j <= r->slot; j++)
	{
		int64_t		k = ((j % RING) + RING) % RING;

		if (r->sent[k] > 0 && r->latest[k] > now - r->window_us)
			return r->latest[k] + r->window_us;
	}
	return now + r->slot_us;
}

/* Bring the bucket's tokens up to now (see rate.h). */
static void
bucket_accrue(JfRate *r, int64_t now)
{
	double		burst = 1.0 + r->rate * (r->backlog ? CATCHUP_SECONDS : BURST_SECONDS);
	double		elapsed;
	double		repaid;

	if (now <= r->last)
		return;
	elapsed = (double) (now - r->last) * r->rate / 1e6;
	repaid = r->owed < elapsed * CATCHUP_FACTOR ? r->owed : elapsed * CATCHUP_FACTOR;
	r->tokens += elapsed + repaid;
	r->owed -= repaid;
	if (r->tokens > burst)
	{
		/* tasks waited through a late turn: owed; idle: gone */
		if (r->backlog)
			r->owed += r->tokens - burst;
		r->tokens = burst;
	}
	r->last = now;
}

int
jf_rate_room(JfRate *r, double rate, int64_t now, int64_t *deadline)
{
	int64_t		at;
	uint32_t	used;
	uint32_t	room;

	if (!r->started || r->rate != rate)
	{
		if (!rate_start(r, rate, now))
		{
			/* out of memory: send nothing, look again soon */
			if (now + 10000 < *deadline)
				*deadline = now + 10000;
			return 0;
		}
	}
	else
		bucket_accrue(r, now);
	if (!r->backlog)
		r->owed = 0.0;
	window_advance(r, now);
	r->now = now;
	r->held = false;
	/* none now: the later of the next token and the window's next room */
	at = INT64_MIN;
	if (r->tokens < 1.0)
	{
		double		speed = rate * (r->owed > 0.0 ? 1.0 + CATCHUP_FACTOR : 1.0);

		at = r->last + (int64_t) ((1.0 - r->tokens) * 1e6 / speed) + 1;
	}
	used = window_count(r, now);
	room = used < r->ceiling ? r->ceiling - used : 0;
	if (room == 0)
	{
		int64_t		frees = window_frees_at(r, now);

		r->held = r->tokens >= 1.0;
		if (frees > at)
			at = frees;
	}
	if (at != INT64_MIN)
	{
		if (at < *deadline)
			*deadline = at;
		return 0;
	}
	if (r->tokens < (double) room)
		room = (uint32_t) r->tokens;
	else
		r->held = r->tokens >= (double) room + 1.0;
	return room > (uint32_t) INT_MAX ? INT_MAX : (int) room;
}

void
jf_rate_spend(JfRate *r, int n, bool waiting)
{
	if (n > 0 && r->sent != NULL)
	{
		r->tokens -= n;
		r->sent[r->slot % RING] += (uint32_t) n;
		r->latest[r->slot % RING] = r->now;
		r->in_window += (uint32_t) n;
	}
	/*
	 * A backlog (tokens kept, then owed, across a late turn) only while this
	 * rate is what holds tasks back, its bucket or its window: a queue held
	 * by another limit (max_concurrent, a full origin) must not save up its
	 * unused rate.
	 */
	r->backlog = waiting && (r->tokens < 1.0 || r->held);

	/*
	 * What is owed is paid back into the room a stall left in the window:
	 * once the window is full, the room is gone, and so is the debt (kept,
	 * it would go out at 1.5 times the rate whenever the window frees room,
	 * echoing the catch-up second after second).
	 */
	if (r->held && r->in_window >= r->ceiling)
		r->owed = 0.0;
}

/*
 * Whether forgetting r loses nothing: a rate started afresh (one token,
 * an empty window) is never more permissive than one whose last look lies
 * a whole window and a slot back, with nothing waiting on it.
 */
bool
jf_rate_idle(const JfRate *r, int64_t now)
{
	return !r->started || now - r->now >= r->window_us + r->slot_us;
}

/* What r holds besides itself (its window, once started). */
size_t
jf_rate_memory(const JfRate *r)
{
	return r->sent != NULL ? RING * (sizeof(uint32_t) + sizeof(int64_t)) : 0;
}

void
jf_rate_free(JfRate *r)
{
	free(r->sent);
	free(r->latest);
	r->sent = NULL;
	r->latest = NULL;
	r->started = false;
}
