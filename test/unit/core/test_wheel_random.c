/*-------------------------------------------------------------------------
 *
 * test_wheel_random.c
 *	  Unit tests for the timing wheel (src/wheel.c): randomised runs.
 *
 * Runs of a few million random operations (inserts in and beyond the
 * horizon and in the past, cancels, stale-handle cancels, advances by
 * small and large steps and backwards, batches cut short) checked step by
 * step against a reference model: a binary heap ordered by (effective
 * due, insertion number), where the effective due of an entry inserted
 * already due is the wheel time at its insertion.  Each run counts as one
 * check, failing at its first error.  An optional argument scales the
 * number of operations.  Edge cases are test_wheel_edges.c.
 *
 *-------------------------------------------------------------------------
 */
#include "core/wheel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

/* Count a whole randomised run as one check, failing at its first error. */
#define RCHECK(cond, ...) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
			return false; \
		} \
	} while (0)

#define HOUR	(3600 * 1000LL)
#define DAY		(24 * HOUR)

/* unit.h's generator, reseeded per run */
static uint64_t
rnd(void)
{
	return unit_rnd64();
}

static int64_t
rnd_range(int64_t lo, int64_t hi)
{
	return lo + (int64_t) (rnd() % (uint64_t) (hi - lo + 1));
}

/* ----------------------------------------------------------------
 * Randomised run against a reference model
 * ----------------------------------------------------------------
 */

typedef struct ModelEntry
{
	int64_t		due;
	int64_t		eff;			/* max(due, wheel time at insert) */
	uint32_t	handle;
	uint32_t	live_pos;		/* in live[], or UINT32_MAX */
	uint8_t		state;			/* 0 live, 1 fired, 2 cancelled */
} ModelEntry;

typedef struct Model
{
	ModelEntry *e;				/* indexed by id */
	uint64_t	nids;
	uint64_t   *heap;			/* ids by (eff, id); lazy deletion */
	size_t		heap_n;
	uint64_t   *live;			/* ids of live entries */
	size_t		live_n;
} Model;

static bool
heap_less(const Model *m, uint64_t a, uint64_t b)
{
	if (m->e[a].eff != m->e[b].eff)
		return m->e[a].eff < m->e[b].eff;
	return a < b;
}

static void
heap_push(Model *m, uint64_t id)
{
	size_t		i = m->heap_n++;

	while (i > 0 && heap_less(m, id, m->heap[(i - 1) / 2]))
	{
		m->heap[i] = m->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	m->heap[i] = id;
}

static void
heap_pop(Model *m)
{
	uint64_t	x = m->heap[--m->heap_n];
	size_t		i = 0;

	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= m->heap_n)
			break;
		if (c + 1 < m->heap_n && heap_less(m, m->heap[c + 1], m->heap[c]))
			c++;
		if (!heap_less(m, m->heap[c], x))
			break;
		m->heap[i] = m->heap[c];
		i = c;
	}
	if (m->heap_n > 0)
		m->heap[i] = x;
}

/* earliest live id, or UINT64_MAX */
static uint64_t
heap_top(Model *m)
{
	while (m->heap_n > 0 && m->e[m->heap[0]].state != 0)
		heap_pop(m);
	return m->heap_n ? m->heap[0] : UINT64_MAX;
}

static void
live_remove(Model *m, uint64_t id)
{
	uint32_t	p = m->e[id].live_pos;
	uint64_t	last = m->live[--m->live_n];

	m->live[p] = last;
	m->e[last].live_pos = p;
	m->e[id].live_pos = UINT32_MAX;
}

/* a due drawn at a random scale around now, sometimes past or too far */
static int64_t
random_due(int64_t now, int64_t horizon)
{
	static const int64_t scales[] = {1, 64, 100, 4096, 5000, 262144,
	300000, 16777216};
	uint64_t	r = rnd() % 100;
	int64_t		scale;

	if (r < 5)
		return now - rnd_range(0, 100000);
	if (r < 8)
		return now + horizon + rnd_range(-2, 2);
	if (r < 10)
		return now + rnd_range(horizon - 70, horizon + 70);
	if (r < 12)
		return now + horizon + rnd_range(1, horizon);
	scale = scales[rnd() % 8];
	if (scale > horizon)
		scale = horizon;
	return now + rnd_range(0, scale);
}

static int64_t
random_step(int64_t horizon)
{
	uint64_t	r = rnd() % 1000;

	if (r < 500)
		return rnd_range(0, 3);
	if (r < 800)
		return rnd_range(0, 100);
	if (r < 900)
		return rnd_range(0, 5000);
	if (r < 950)
		return rnd_range(0, 300000);
	if (r < 970)
		return rnd_range(0, horizon);
	if (r < 975)
		return rnd_range(horizon, 3 * horizon);
	return -rnd_range(1, 100000);	/* clock steps back */
}

static bool
random_run(int64_t start, int64_t horizon, long ops, uint32_t cap,
		   uint64_t seed)
{
	JfWheel    *w = jf_wheel_create(start, horizon, cap);
	Model		m;
	int64_t		now = start;
	int64_t		clock = start;	/* the caller's clock, may step back */
	uint64_t	next_id = 0;
	size_t		max_ids = (size_t) ops + 1;
	JfWheelExpired *out = malloc(4096 * sizeof(JfWheelExpired));
	uint64_t	stale_id[64];
	uint32_t	stale_h[64];
	int			nstale = 0;
	int			vain_wakes = 0;
	size_t		target;			/* live population aimed at */
	bool		ok = false;

	unit_rng_state = seed;
	target = 1000 + rnd() % 20000;
	memset(&m, 0, sizeof(m));
	m.e = malloc(max_ids * sizeof(ModelEntry));
	m.heap = malloc(max_ids * sizeof(uint64_t));
	m.live = malloc(max_ids * sizeof(uint64_t));
	if (!w || !m.e || !m.heap || !m.live || !out)
		goto done;

	for (long op = 0; op < ops; op++)
	{
		uint64_t	r = rnd() % 100;
		int			insert_pct = m.live_n < target ? 60 : 35;

		if (op % 50000 == 0)
			target = 100 + rnd() % 30000;

		if ((long) r < insert_pct)
		{
			int64_t		due = random_due(now, horizon);
			uint32_t	h;
			JfWheelStatus st = jf_wheel_insert(w, next_id, due, &h);
			bool		beyond = due > now && due - now > horizon;

			if (beyond)
			{
				RCHECK(st == JF_WHEEL_BEYOND_HORIZON, "op %ld", op);
				continue;
			}
			if (cap && m.live_n >= cap)
			{
				RCHECK(st == JF_WHEEL_FULL, "op %ld", op);
				continue;
			}
			RCHECK(st == JF_WHEEL_OK, "op %ld st %d", op, st);
			m.e[next_id].due = due;
			m.e[next_id].eff = due > now ? due : now;
			m.e[next_id].handle = h;
			m.e[next_id].state = 0;
			m.e[next_id].live_pos = m.live_n;
			m.live[m.live_n++] = next_id;
			heap_push(&m, next_id);
			next_id++;
		}
		else if (r < 75)
		{
			uint64_t	id;

			if (nstale > 0 && rnd() % 4 == 0)
			{
				int			k = rnd() % nstale;

				RCHECK(!jf_wheel_cancel(w, stale_h[k], stale_id[k]),
					   "op %ld stale cancel accepted", op);
				continue;
			}
			if (m.live_n == 0)
				continue;
			id = m.live[rnd() % m.live_n];
			RCHECK(jf_wheel_cancel(w, m.e[id].handle, id), "op %ld", op);
			m.e[id].state = 2;
			live_remove(&m, id);
			{
				int			k = nstale < 64 ? nstale++ : (int) (rnd() % 64);

				stale_h[k] = m.e[id].handle;
				stale_id[k] = id;
			}
		}
		else
		{
			size_t		max = (rnd() % 4 == 0) ? 4096 : 1 + rnd() % 16;
			size_t		n;
			int64_t		nd = jf_wheel_next_deadline(w);
			uint64_t	top = heap_top(&m);
			bool		to_deadline = (r >= 95 && nd != INT64_MAX);

			/* next_deadline: exact bound, never late */
			if (top == UINT64_MAX)
				RCHECK(nd == INT64_MAX, "op %ld nd %" PRId64, op, nd);
			else if (m.e[top].eff <= now)
				RCHECK(nd == now, "op %ld", op);
			else
				RCHECK(nd > now && nd <= m.e[top].eff,
					   "op %ld nd %" PRId64 " min %" PRId64, op, nd,
					   m.e[top].eff);

			if (to_deadline)
				clock = nd;
			else
				clock += random_step(horizon);
			if (clock > now)
				now = clock;

			n = jf_wheel_advance(w, clock, out, max);
			RCHECK(jf_wheel_now(w) == now, "op %ld", op);
			for (size_t k = 0; k < n; k++)
			{
				uint64_t	id = heap_top(&m);

				RCHECK(id != UINT64_MAX && m.e[id].eff <= now,
					   "op %ld fired too early or too many", op);
				RCHECK(out[k].id == id && out[k].due_ms == m.e[id].due,
					   "op %ld k %zu got id %" PRIu64 " due %" PRId64
					   " want id %" PRIu64 " due %" PRId64, op, k,
					   out[k].id, out[k].due_ms, id, m.e[id].due);
				m.e[id].state = 1;
				live_remove(&m, id);
				heap_pop(&m);
				if (nstale < 64)
				{
					stale_h[nstale] = m.e[id].handle;
					stale_id[nstale++] = id;
				}
			}
			/* nothing due held back unless the batch was full */
			if (n < max)
			{
				uint64_t	t = heap_top(&m);

				RCHECK(t == UINT64_MAX || m.e[t].eff > now,
					   "op %ld id %" PRIu64 " due %" PRId64
					   " held back at %" PRId64, op, t, m.e[t].eff, now);
			}
			if (to_deadline && n == 0)
			{
				RCHECK(++vain_wakes <= jf_wheel_levels(w), "op %ld", op);
			}
			else
				vain_wakes = 0;
		}
		RCHECK(jf_wheel_count(w) == m.live_n, "op %ld", op);
		RCHECK(jf_wheel_horizon_end(w) == now + horizon, "op %ld", op);
	}

	/* drain: everything left fires, exactly once */
	for (;;)
	{
		size_t		n = jf_wheel_advance(w, now + 4 * horizon, out, 4096);

		now += 4 * horizon;
		if (n == 0)
			break;
		for (size_t k = 0; k < n; k++)
		{
			uint64_t	id = heap_top(&m);

			RCHECK(out[k].id == id, "drain");
			m.e[id].state = 1;
			live_remove(&m, id);
			heap_pop(&m);
		}
	}
	RCHECK(m.live_n == 0 && jf_wheel_count(w) == 0, "drain left %zu", m.live_n);
	ok = true;

done:
	free(m.e);
	free(m.heap);
	free(m.live);
	free(out);
	jf_wheel_destroy(w);
	return ok;
}

int
main(int argc, char **argv)
{
	long		scale = (argc > 1) ? atol(argv[1]) : 1;

	CHECK(random_run(0, 63, 1500000 * scale, 0, 1));
	CHECK(random_run(-5000, 64, 1500000 * scale, 0, 2));
	CHECK(random_run(1700000000123LL, 5000, 5000000 * scale, 0, 3));
	CHECK(random_run(1700000000000LL, HOUR, 10000000 * scale, 0, 4));
	CHECK(random_run(123456789, DAY, 10000000 * scale, 0, 5));
	CHECK(random_run(42, HOUR, 1500000 * scale, 500, 6));

	return unit_done("test_wheel_random");
}
