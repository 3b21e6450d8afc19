/*-------------------------------------------------------------------------
 *
 * test_wheel_edges.c
 *	  Unit tests for the timing wheel (src/wheel.c): edge cases.
 *
 * Edge cases written out one by one: level boundaries, the horizon, past
 * dues, a capped pool, clock steps, pool shrink, stale handles, batching,
 * next_deadline's exactness, the shared ready/level-0 list, cascade runs,
 * slab allocation with its hysteresis.  The randomised run against a
 * reference model is test_wheel_random.c.
 *
 *-------------------------------------------------------------------------
 */
#include "core/wheel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#define HOUR	(3600 * 1000LL)
#define DAY		(24 * HOUR)

/* uniform in [lo, hi], from unit.h's generator at its default seed */
static int64_t
rnd_range(int64_t lo, int64_t hi)
{
	return lo + (int64_t) (unit_rnd64() % (uint64_t) (hi - lo + 1));
}

/* ----------------------------------------------------------------
 * Edge cases
 * ----------------------------------------------------------------
 */

static void
test_create_and_levels(void)
{
	JfWheel    *w;

	CHECK(jf_wheel_create(0, 0, 0) == NULL);
	CHECK(jf_wheel_create(0, -5, 0) == NULL);
	CHECK(jf_wheel_create(0, INT64_MAX, 0) == NULL);

	w = jf_wheel_create(0, 63, 0);
	CHECK(w && jf_wheel_levels(w) == 1);
	jf_wheel_destroy(w);
	w = jf_wheel_create(0, 64, 0);
	CHECK(w && jf_wheel_levels(w) == 2);
	jf_wheel_destroy(w);
	w = jf_wheel_create(0, HOUR, 0);
	CHECK(w && jf_wheel_levels(w) == 4);
	jf_wheel_destroy(w);
	w = jf_wheel_create(0, DAY, 0);
	CHECK(w && jf_wheel_levels(w) == 5);
	jf_wheel_destroy(w);
	w = jf_wheel_create(0, 365 * DAY, 0);
	CHECK(w && jf_wheel_levels(w) == 6);
	jf_wheel_destroy(w);
	jf_wheel_destroy(NULL);
}

static void
test_empty(void)
{
	JfWheel    *w = jf_wheel_create(1700000000000LL, HOUR, 0);
	JfWheelExpired out[4];

	CHECK(jf_wheel_next_deadline(w) == INT64_MAX);
	CHECK(jf_wheel_advance(w, 1700000000000LL, out, 4) == 0);
	CHECK(jf_wheel_advance(w, 1700000000000LL + DAY, out, 4) == 0);
	CHECK(jf_wheel_now(w) == 1700000000000LL + DAY);
	CHECK(jf_wheel_horizon_end(w) == 1700000000000LL + DAY + HOUR);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_next_deadline(w) == INT64_MAX);
	CHECK(!jf_wheel_cancel(w, 0, 0));
	CHECK(!jf_wheel_cancel(w, JF_WHEEL_NO_HANDLE, 0));
	jf_wheel_destroy(w);
}

static void
test_due_now_and_past(void)
{
	int64_t		t0 = 1700000000000LL;
	JfWheel    *w = jf_wheel_create(t0, HOUR, 0);
	JfWheelExpired out[8];
	uint32_t	h;

	CHECK(jf_wheel_insert(w, 1, t0, &h) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 2, t0 - 5000, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 3, INT64_MIN, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_count(w) == 3);
	CHECK(jf_wheel_next_deadline(w) == t0);
	/* backwards advance still hands out what is due */
	CHECK(jf_wheel_advance(w, t0 - 100, out, 8) == 3);
	CHECK(out[0].id == 1 && out[0].due_ms == t0);
	CHECK(out[1].id == 2 && out[1].due_ms == t0 - 5000);
	CHECK(out[2].id == 3 && out[2].due_ms == INT64_MIN);
	CHECK(jf_wheel_now(w) == t0);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(!jf_wheel_cancel(w, h, 1));

	/* a past entry inserted later fires after those already due */
	CHECK(jf_wheel_insert(w, 10, t0 + 5, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_advance(w, t0 + 10, out, 0) == 0);
	CHECK(jf_wheel_insert(w, 11, t0 + 1, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_advance(w, t0 + 10, out, 8) == 2);
	CHECK(out[0].id == 10 && out[1].id == 11 && out[1].due_ms == t0 + 1);
	jf_wheel_destroy(w);
}

/*
 * Dues around every level boundary, from clocks at various phases (aligned
 * and not), fire exactly at their millisecond.
 */
static void
test_level_boundaries(void)
{
	static const int64_t bases[] = {0, 1, 64, 4096, 262144, 16777216,
	262143, 4095, 16777215, 1700000000123LL, 1073741823};
	int64_t		dists[64];
	int			nd = 0;
	JfWheelExpired out[4];

	for (int p = 1; p <= 5; p++)
	{
		int64_t		b = 1LL << (6 * p);

		dists[nd++] = b - 1;
		dists[nd++] = b;
		dists[nd++] = b + 1;
		dists[nd++] = 2 * b;
		dists[nd++] = 63 * b;
	}
	dists[nd++] = 1;
	dists[nd++] = DAY - 1;
	dists[nd++] = DAY;

	for (size_t bi = 0; bi < sizeof(bases) / sizeof(bases[0]); bi++)
	{
		for (int di = 0; di < nd; di++)
		{
			int64_t		start = 1000000000000LL;
			JfWheel    *w = jf_wheel_create(start, DAY, 0);
			int64_t		now = start + bases[bi];
			int64_t		due = now + dists[di];
			JfWheelStatus st;
			bool		ok = true;

			jf_wheel_advance(w, now, out, 4);
			st = jf_wheel_insert(w, 42, due, NULL);
			if (dists[di] > DAY)
			{
				CHECK(st == JF_WHEEL_BEYOND_HORIZON);
				CHECK(jf_wheel_count(w) == 0);
				jf_wheel_destroy(w);
				continue;
			}
			CHECK(st == JF_WHEEL_OK);
			CHECK(jf_wheel_next_deadline(w) == due);
			/* walk there through several intermediate wake-ups */
			for (int k = 1; k < 8 && ok; k++)
			{
				int64_t		t = now + (due - 1 - now) * k / 8;

				if (jf_wheel_advance(w, t, out, 4) != 0)
					ok = false;
				if (jf_wheel_next_deadline(w) != due)
					ok = false;
			}
			CHECK(ok);
			CHECK(jf_wheel_advance(w, due - 1, out, 4) == 0);
			CHECK(jf_wheel_next_deadline(w) == due);
			CHECK(jf_wheel_advance(w, due, out, 4) == 1);
			CHECK(out[0].id == 42 && out[0].due_ms == due);
			CHECK(jf_wheel_next_deadline(w) == INT64_MAX);
			jf_wheel_destroy(w);
		}
	}
}

static void
test_horizon(void)
{
	int64_t		t0 = 555;
	JfWheel    *w = jf_wheel_create(t0, DAY, 0);
	JfWheelExpired out[4];
	uint32_t	h = 7;

	CHECK(jf_wheel_horizon_end(w) == t0 + DAY);
	CHECK(jf_wheel_insert(w, 1, t0 + DAY + 1, &h) == JF_WHEEL_BEYOND_HORIZON);
	CHECK(h == 7);
	CHECK(jf_wheel_insert(w, 2, INT64_MAX, NULL) == JF_WHEEL_BEYOND_HORIZON);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_insert(w, 3, t0 + DAY, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_next_deadline(w) == t0 + DAY);
	CHECK(jf_wheel_advance(w, t0 + DAY - 1, out, 4) == 0);
	/* the horizon moves with the clock */
	CHECK(jf_wheel_horizon_end(w) == t0 + 2 * DAY - 1);
	CHECK(jf_wheel_insert(w, 4, t0 + 2 * DAY - 1, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 5, t0 + 2 * DAY, NULL) == JF_WHEEL_BEYOND_HORIZON);
	CHECK(jf_wheel_advance(w, t0 + DAY, out, 4) == 1 && out[0].id == 3);
	CHECK(jf_wheel_next_deadline(w) == t0 + 2 * DAY - 1);
	CHECK(jf_wheel_advance(w, t0 + 2 * DAY - 1, out, 4) == 1 && out[0].id == 4);
	jf_wheel_destroy(w);

	/* a clock near the end of time does not overflow */
	w = jf_wheel_create(INT64_MAX - 10, HOUR, 0);
	CHECK(jf_wheel_horizon_end(w) == INT64_MAX);
	CHECK(jf_wheel_insert(w, 1, INT64_MAX, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_advance(w, INT64_MAX, out, 4) == 1 && out[0].id == 1);
	jf_wheel_destroy(w);
}

static void
test_full(void)
{
	JfWheel    *w = jf_wheel_create(0, HOUR, 100);
	uint32_t	h[100];
	uint32_t	x = 12345;
	bool		ok = true;
	JfWheelExpired out[200];

	for (int i = 0; i < 100; i++)
		if (jf_wheel_insert(w, i, 10 + i, &h[i]) != JF_WHEEL_OK)
			ok = false;
	CHECK(ok);
	CHECK(jf_wheel_insert(w, 100, 50, &x) == JF_WHEEL_FULL);
	CHECK(x == 12345);
	CHECK(jf_wheel_insert(w, 100, -50, NULL) == JF_WHEEL_FULL);
	CHECK(jf_wheel_count(w) == 100);
	CHECK(jf_wheel_cancel(w, h[50], 50));
	CHECK(jf_wheel_insert(w, 100, 60, NULL) == JF_WHEEL_OK);
	CHECK(jf_wheel_advance(w, 200, out, 200) == 100);
	CHECK(out[50].id == 100 && out[51].id == 51);
	jf_wheel_destroy(w);
}

static void
test_clock_steps(void)
{
	int64_t		t0 = 1700000000000LL;
	JfWheel    *w = jf_wheel_create(t0, HOUR, 0);
	JfWheelExpired out[1000];
	size_t		n;
	bool		ok = true;

	for (int i = 0; i < 500; i++)
		jf_wheel_insert(w, i, t0 + HOUR - i * 7000, NULL);
	/* steps back: nothing fires, wheel time stays */
	CHECK(jf_wheel_advance(w, t0 - HOUR, out, 1000) == 0);
	CHECK(jf_wheel_advance(w, 0, out, 1000) == 0);
	CHECK(jf_wheel_now(w) == t0);
	CHECK(jf_wheel_advance(w, t0 + 10 * 7000, out, 1000) == 0);
	CHECK(jf_wheel_advance(w, t0 + 5, out, 1000) == 0);
	CHECK(jf_wheel_now(w) == t0 + 70000);
	/* a huge jump fires everything, in due order */
	n = jf_wheel_advance(w, t0 + 1000 * DAY, out, 1000);
	CHECK(n == 500);
	for (int i = 0; i < 500 && (size_t) i < n; i++)
		if (out[i].id != (uint64_t) (499 - i) ||
			out[i].due_ms != t0 + HOUR - (499 - i) * 7000)
			ok = false;
	CHECK(ok);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_horizon_end(w) == t0 + 1000 * DAY + HOUR);
	jf_wheel_destroy(w);
}

static void
test_batches_same_ms(void)
{
	JfWheel    *w = jf_wheel_create(0, DAY, 0);
	JfWheelExpired out[8];
	uint64_t	expect = 0;
	bool		ok = true;
	size_t		n;
	int			calls = 0;

	/*
	 * Same due, inserted from ever closer clocks (first ones land at a
	 * high level, later ones lower): insertion order must hold.
	 */
	for (int i = 0; i < 3000; i++)
	{
		if (i % 300 == 0)
			jf_wheel_advance(w, (int64_t) i * 1000, out, 0);
		jf_wheel_insert(w, i, 4000000, NULL);
	}
	jf_wheel_advance(w, 3999999, out, 8);
	while ((n = jf_wheel_advance(w, 4000000, out, 7)) > 0)
	{
		calls++;
		if (n > 7)
			ok = false;
		for (size_t k = 0; k < n; k++)
			if (out[k].id != expect++ || out[k].due_ms != 4000000)
				ok = false;
	}
	CHECK(ok);
	CHECK(expect == 3000);
	CHECK(calls == (3000 + 6) / 7);
	jf_wheel_destroy(w);
}

static void
test_stale_handles(void)
{
	JfWheel    *w = jf_wheel_create(0, HOUR, 0);
	JfWheelExpired out[4];
	uint32_t	h1,
				h2,
				h3;

	CHECK(jf_wheel_insert(w, 1, 10, &h1) == JF_WHEEL_OK);
	CHECK(h1 != JF_WHEEL_NO_HANDLE);
	CHECK(jf_wheel_due(w, h1, 1) == 10);
	CHECK(jf_wheel_due(w, h1, 2) == INT64_MIN);	/* wrong id */
	CHECK(jf_wheel_due(w, h1 + 1, 1) == INT64_MIN);	/* never handed out */
	CHECK(jf_wheel_due(w, 0xFFFF0000u, 1) == INT64_MIN);
	CHECK(!jf_wheel_cancel(w, h1, 2));	/* wrong id */
	CHECK(!jf_wheel_cancel(w, h1 + 1, 1));	/* never handed out */
	CHECK(!jf_wheel_cancel(w, 0xFFFF0000u, 1));	/* no such chunk */
	CHECK(jf_wheel_advance(w, 10, out, 4) == 1);
	CHECK(jf_wheel_due(w, h1, 1) == INT64_MIN);	/* fired */
	CHECK(!jf_wheel_cancel(w, h1, 1));	/* fired */
	CHECK(jf_wheel_insert(w, 2, 20, &h2) == JF_WHEEL_OK);
	CHECK(h2 == h1);			/* reused */
	CHECK(jf_wheel_due(w, h1, 1) == INT64_MIN);	/* stale: other id now */
	CHECK(jf_wheel_due(w, h2, 2) == 20);
	CHECK(!jf_wheel_cancel(w, h1, 1));	/* stale: other id now */
	CHECK(jf_wheel_count(w) == 1);
	CHECK(jf_wheel_cancel(w, h2, 2));
	CHECK(!jf_wheel_cancel(w, h2, 2));	/* already cancelled */
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_next_deadline(w) == INT64_MAX);
	CHECK(jf_wheel_advance(w, 1000, out, 4) == 0);
	/* cancel in the ready list */
	CHECK(jf_wheel_insert(w, 3, 5, &h3) == JF_WHEEL_OK);
	CHECK(jf_wheel_due(w, h3, 3) == 5);		/* past due keeps its due */
	CHECK(jf_wheel_cancel(w, h3, 3));
	CHECK(jf_wheel_due(w, h3, 3) == INT64_MIN);	/* cancelled */
	CHECK(jf_wheel_advance(w, 1000, out, 4) == 0);
	jf_wheel_destroy(w);
}

static void
test_shrink(void)
{
	JfWheel    *w = jf_wheel_create(0, HOUR, 0);
	size_t		empty = jf_wheel_memory(w);
	size_t		one_chunk,
				full;
	JfWheelExpired out[1024];
	size_t		got = 0,
				n;
	uint32_t   *h = malloc(300000 * sizeof(uint32_t));

	jf_wheel_insert(w, 0, 1, NULL);
	one_chunk = jf_wheel_memory(w);
	CHECK(one_chunk > empty);
	for (int i = 1; i < 300000; i++)
		jf_wheel_insert(w, i, 1 + i % 100000, NULL);
	full = jf_wheel_memory(w);
	CHECK(full >= 300000 * 20);
	CHECK(full <= 300000 * 32);
	while ((n = jf_wheel_advance(w, 2 * HOUR, out, 1024)) > 0)
		got += n;
	CHECK(got == 300000);
	CHECK(jf_wheel_memory(w) < full / 3);
	CHECK(jf_wheel_memory(w) == one_chunk);

	/* same through cancels; and the pool grows back */
	for (int i = 0; i < 300000; i++)
		jf_wheel_insert(w, i, 2 * HOUR + 1 + i % 5000, &h[i]);
	CHECK(jf_wheel_memory(w) == full);
	CHECK(jf_wheel_count(w) == 300000);
	for (int i = 0; i < 300000; i++)
		got -= jf_wheel_cancel(w, h[i], i);
	CHECK(got == 0);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_memory(w) == one_chunk);
	CHECK(jf_wheel_next_deadline(w) == INT64_MAX);
	free(h);
	jf_wheel_destroy(w);
}

/*
 * The ready part and level 0 are one list in firing order: entries put
 * into level-0 slots out of time order (before, between and after
 * occupied ones), past dues arriving while level-0 entries wait, partial
 * pops and cancels at every kind of position (ready tail, list head after
 * a partial pop, slot heads, tails and middles) must keep (due, insertion)
 * order.
 */
static void
test_level0_list(void)
{
	JfWheel    *w = jf_wheel_create(1000, HOUR, 0);
	JfWheelExpired out[16];
	uint32_t	h[16];
	size_t		n;

	/* clock at 1000: digit 40 of its 64-ms block [960, 1024) */
	CHECK(jf_wheel_insert(w, 1, 1020, &h[1]) == JF_WHEEL_OK);	/* level 0 */
	CHECK(jf_wheel_insert(w, 2, 1005, &h[2]) == JF_WHEEL_OK);	/* before it */
	CHECK(jf_wheel_insert(w, 3, 1012, &h[3]) == JF_WHEEL_OK);	/* between */
	CHECK(jf_wheel_insert(w, 4, 1005, &h[4]) == JF_WHEEL_OK);	/* same slot */
	CHECK(jf_wheel_insert(w, 5, 1023, &h[5]) == JF_WHEEL_OK);	/* after */
	CHECK(jf_wheel_insert(w, 6, 1005, &h[6]) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 7, 990, &h[7]) == JF_WHEEL_OK);	/* past */
	CHECK(jf_wheel_insert(w, 8, 1000, &h[8]) == JF_WHEEL_OK);	/* now */
	CHECK(jf_wheel_insert(w, 9, 1012, &h[9]) == JF_WHEEL_OK);
	CHECK(jf_wheel_next_deadline(w) == 1000);
	/* cancel the ready tail, a slot middle, a slot tail */
	CHECK(jf_wheel_cancel(w, h[8], 8));
	CHECK(jf_wheel_cancel(w, h[4], 4));
	CHECK(jf_wheel_cancel(w, h[9], 9));
	CHECK(jf_wheel_next_deadline(w) == 1000);
	CHECK(jf_wheel_advance(w, 1000, out, 16) == 1 && out[0].id == 7);
	CHECK(jf_wheel_next_deadline(w) == 1005);
	/* cancel a slot head: slot 1005 now holds only 6 */
	CHECK(jf_wheel_cancel(w, h[2], 2));
	CHECK(jf_wheel_next_deadline(w) == 1005);

	/* make 1005 and 1012 due, pop one, then a past due joins the ready part */
	CHECK(jf_wheel_advance(w, 1015, out, 1) == 1 && out[0].id == 6);
	CHECK(jf_wheel_insert(w, 10, 1001, &h[10]) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 11, 1021, &h[11]) == JF_WHEEL_OK);
	CHECK(jf_wheel_count(w) == 5);
	n = jf_wheel_advance(w, 1015, out, 16);
	CHECK(n == 2 && out[0].id == 3 && out[1].id == 10);
	CHECK(jf_wheel_next_deadline(w) == 1020);
	n = jf_wheel_advance(w, 1030, out, 16);
	CHECK(n == 3 && out[0].id == 1 && out[1].id == 11 && out[2].id == 5);
	CHECK(jf_wheel_count(w) == 0);

	/* partial pops leave a head whose prev is stale: cancel it, then more */
	for (int i = 0; i < 6; i++)
		CHECK(jf_wheel_insert(w, 100 + i, 1031 + i % 2, &h[i]) == JF_WHEEL_OK);
	CHECK(jf_wheel_advance(w, 1040, out, 2) == 2);
	CHECK(out[0].id == 100 && out[1].id == 102);
	CHECK(jf_wheel_cancel(w, h[4], 104));	/* the head now */
	CHECK(jf_wheel_cancel(w, h[3], 103));	/* the tail */
	CHECK(jf_wheel_insert(w, 106, 1000, NULL) == JF_WHEEL_OK);
	n = jf_wheel_advance(w, 1040, out, 16);
	CHECK(n == 3 && out[0].id == 101 && out[1].id == 105 && out[2].id == 106);
	CHECK(jf_wheel_cancel(w, h[0], 100) == false);
	CHECK(jf_wheel_count(w) == 0 && jf_wheel_next_deadline(w) == INT64_MAX);
	jf_wheel_destroy(w);
}

/*
 * Cascades move runs of entries bound for the same list at once.  Runs
 * form and break in every way: many entries per due (one run per lower
 * slot), dues interleaved (runs of one), entries adjacent in the pool and
 * not (cancels and reuse in between), and dues equal to a slot's start
 * (runs onto the ready list).  Every entry must fire at its due, in (due,
 * insertion) order.
 */
static void
test_cascade_runs(void)
{
	JfWheel    *w = jf_wheel_create(0, DAY, 0);
	JfWheelExpired out[64];
	uint32_t   *h = malloc(40000 * sizeof(uint32_t));
	int64_t    *due = malloc(40000 * sizeof(int64_t));
	int64_t		last_due = -1;
	uint64_t	last_id = 0;
	long		fired = 0,
				cancelled = 0;
	bool		ok = true;

	for (int i = 0; i < 40000; i++)
	{
		switch (i % 4)
		{
			case 0:				/* sorted, many per ms */
				due[i] = 300000 + i / 40;
				break;
			case 1:				/* interleaved */
				due[i] = 300000 + (i * 7919) % 700000;
				break;
			case 2:				/* level starts */
				due[i] = (int64_t) 262144 * (1 + i % 3) + 4096 * (i % 5);
				break;
			default:			/* ragged */
				due[i] = 1 + (i * 104729) % 2000000;
				break;
		}
		if (jf_wheel_insert(w, i, due[i], &h[i]) != JF_WHEEL_OK)
			ok = false;
		/* cancel some, so that later entries reuse scattered handles */
		if (i % 13 == 5 && i > 100)
		{
			if (!jf_wheel_cancel(w, h[i - 97], i - 97))
				ok = false;
			due[i - 97] = -1;
			cancelled++;
		}
	}
	CHECK(ok);
	for (int64_t t = 0, prev_t = -1;; prev_t = t, t += 1 + t % 3000)
	{
		size_t		n;

		if (t > 2000000)
			t = 2000000;
		while ((n = jf_wheel_advance(w, t, out, 64)) > 0)
		{
			for (size_t k = 0; k < n; k++)
			{
				uint64_t	id = out[k].id;

				/* live, at its due, not early, not late, in order */
				if (id >= 40000 || due[id] != out[k].due_ms ||
					out[k].due_ms > t || out[k].due_ms <= prev_t ||
					out[k].due_ms < last_due ||
					(out[k].due_ms == last_due && id < last_id))
					ok = false;
				last_due = out[k].due_ms;
				last_id = id;
				due[id] = -2;
				fired++;
			}
		}
		if (t == 2000000)
			break;
	}
	CHECK(ok);
	CHECK(fired + cancelled == 40000);
	CHECK(jf_wheel_count(w) == 0);
	free(h);
	free(due);
	jf_wheel_destroy(w);
}

/*
 * Chunks come from 4-chunk slabs.  Growing across several slabs, draining
 * (by advance and by cancel) and growing again must keep memory at what
 * the chunks in use hold, with one chunk of hysteresis at every boundary,
 * including slab boundaries.
 */
static void
test_pool_slabs(void)
{
	JfWheel    *w = jf_wheel_create(0, HOUR, 0);
	const size_t chunk = 65536;
	uint32_t   *h = malloc(10 * chunk * sizeof(uint32_t));
	JfWheelExpired out[512];
	size_t		one,
				m,
				n,
				got = 0;
	bool		ok = true;

	jf_wheel_insert(w, 0, 5, &h[0]);
	one = jf_wheel_memory(w);
	for (size_t i = 1; i < 9 * chunk; i++)
		jf_wheel_insert(w, i, 10 + i % 1000, &h[i]);
	m = jf_wheel_memory(w);
	CHECK(m - one == 8 * chunk * 24);

	/*
	 * Hover around the boundary of chunk 8, the first of the third slab:
	 * its chunk stays while the others have less than a chunk free.
	 */
	for (int r = 0; r < 20; r++)
	{
		for (size_t i = 8 * chunk - 10; i < 9 * chunk; i++)
			ok &= jf_wheel_cancel(w, h[i], i);
		ok &= jf_wheel_memory(w) == m;
		for (size_t i = 8 * chunk - 10; i < 9 * chunk; i++)
			ok &= jf_wheel_insert(w, i, 10 + i % 1000, &h[i]) == JF_WHEEL_OK;
	}
	CHECK(ok);
	CHECK(jf_wheel_count(w) == 9 * chunk);
	CHECK(jf_wheel_memory(w) == m);
	/*
	 * Two chunks' worth less in use: chunk 8 (and with it the third slab)
	 * goes, empty chunk 7 stays as the one chunk of slack.
	 */
	for (size_t i = 7 * chunk; i < 9 * chunk; i++)
		ok &= jf_wheel_cancel(w, h[i], i);
	CHECK(ok);
	CHECK(jf_wheel_memory(w) == m - chunk * 24);
	for (size_t i = 7 * chunk; i < 9 * chunk; i++)
		ok &= jf_wheel_insert(w, i, 10 + i % 1000, &h[i]) == JF_WHEEL_OK;
	CHECK(ok);
	CHECK(jf_wheel_memory(w) == m);

	/* drain by advance: back to one chunk */
	while ((n = jf_wheel_advance(w, HOUR, out, 512)) > 0)
		got += n;
	CHECK(got == 9 * chunk);
	CHECK(jf_wheel_memory(w) == one);

	/* grow again (handles reused first), then drain by cancel */
	for (size_t i = 0; i < 10 * chunk; i++)
		ok &= jf_wheel_insert(w, i, HOUR + 1 + i % 777, &h[i]) == JF_WHEEL_OK;
	CHECK(ok);
	CHECK(jf_wheel_memory(w) == m + chunk * 24);
	for (size_t i = 0; i < 10 * chunk; i++)
		ok &= jf_wheel_cancel(w, h[i], i);
	CHECK(ok);
	CHECK(jf_wheel_count(w) == 0);
	CHECK(jf_wheel_memory(w) == one);
	/* and destroy with a partly used slab */
	for (size_t i = 0; i < 5 * chunk; i++)
		jf_wheel_insert(w, i, HOUR + 2000 + i % 5, NULL);
	CHECK(jf_wheel_count(w) == 5 * chunk);
	free(h);
	jf_wheel_destroy(w);
}

/*
 * Without cancels next_deadline is exact; after cancelling the earliest
 * entry of a coarse slot, sleeping until it and advancing converges on the
 * true earliest due in at most one vain wake-up per level.
 */
static void
test_next_deadline(void)
{
	JfWheel    *w = jf_wheel_create(0, DAY, 0);
	JfWheelExpired out[4];
	uint32_t	ha,
				hb;
	int			wakes = 0;
	int64_t		nd;
	bool		exact = true;

	for (int i = 0; i < 2000; i++)
	{
		int64_t		due = rnd_range(1, DAY);
		int64_t		before = jf_wheel_next_deadline(w);

		jf_wheel_insert(w, i, due, NULL);
		if (jf_wheel_next_deadline(w) != (due < before ? due : before))
			exact = false;
	}
	CHECK(exact);
	jf_wheel_destroy(w);

	w = jf_wheel_create(0, DAY, 0);
	CHECK(jf_wheel_insert(w, 1, 20000000, &ha) == JF_WHEEL_OK);
	CHECK(jf_wheel_insert(w, 2, 20000000 + 3000000, &hb) == JF_WHEEL_OK);
	CHECK(jf_wheel_next_deadline(w) == 20000000);
	CHECK(jf_wheel_cancel(w, ha, 1));
	while ((nd = jf_wheel_next_deadline(w)) < 23000000 && wakes < 10)
	{
		CHECK(nd > jf_wheel_now(w));
		CHECK(jf_wheel_advance(w, nd, out, 4) == 0);
		wakes++;
	}
	CHECK(nd == 23000000);
	CHECK(wakes <= jf_wheel_levels(w));
	CHECK(jf_wheel_advance(w, nd, out, 4) == 1 && out[0].id == 2);
	jf_wheel_destroy(w);
}

int
main(void)
{
	test_create_and_levels();
	test_empty();
	test_due_now_and_past();
	test_level_boundaries();
	test_horizon();
	test_full();
	test_clock_steps();
	test_batches_same_ms();
	test_stale_handles();
	test_shrink();
	test_next_deadline();
	test_level0_list();
	test_cascade_runs();
	test_pool_slabs();

	return unit_done("test_wheel_edges");
}
