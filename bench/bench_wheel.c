/*-------------------------------------------------------------------------
 *
 * bench_wheel.c
 *	  Benchmark of the timing wheel (src/wheel.c) against a binary heap.
 *
 * For 1M and 10M tasks whose dues are spread uniformly over a 1-hour
 * horizon, measures ns per insert, per cancel and per expiry, bytes per
 * task and the cost of next_deadline, once with the tasks inserted in due
 * order (what the worker's "ORDER BY run_at" load gives; cancels then go
 * in the same order) and once in random order (cancels in another random
 * order).  The baseline is an indexed binary min-heap written here, with
 * position tracking so that cancel is O(log n), ordered like the wheel by
 * (due, insertion number).  Expiry walks the clock over the hour in 10 ms
 * steps, collecting due entries in batches of up to 4096.
 *
 * Usage: bench_wheel [quick]   ("quick" runs only 1M tasks)
 *
 *-------------------------------------------------------------------------
 */
#include "wheel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOUR_MS		(3600 * 1000LL)
#define STEP_MS		10
#define BATCH		4096

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* sink for results, so that nothing is optimised away */
static volatile uint64_t sink;

/* ----------------------------------------------------------------
 * Baseline: indexed binary min-heap
 * ----------------------------------------------------------------
 */

typedef struct HeapItem
{
	int64_t		due;
	uint32_t	seq;			/* insertion number: FIFO among equal dues */
	uint32_t	node;
} HeapItem;

typedef struct Heap
{
	HeapItem   *items;
	uint32_t   *pos;			/* node -> index in items */
	uint64_t   *ids;			/* node -> task id */
	size_t		n;
	uint32_t	seq;
} Heap;

static bool
heap_init(Heap *h, size_t cap)
{
	h->items = malloc(cap * sizeof(HeapItem));
	h->pos = malloc(cap * sizeof(uint32_t));
	h->ids = malloc(cap * sizeof(uint64_t));
	h->n = 0;
	h->seq = 0;
	return h->items && h->pos && h->ids;
}

static void
heap_free(Heap *h)
{
	free(h->items);
	free(h->pos);
	free(h->ids);
}

static size_t
heap_memory(const Heap *h)
{
	return h->n * (sizeof(HeapItem) + sizeof(uint32_t) + sizeof(uint64_t));
}

static inline bool
item_less(const HeapItem *a, const HeapItem *b)
{
	return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static inline void
heap_place(Heap *h, size_t i, HeapItem it)
{
	h->items[i] = it;
	h->pos[it.node] = i;
}

static void
sift_up(Heap *h, size_t i, HeapItem it)
{
	while (i > 0)
	{
		size_t		p = (i - 1) / 2;

		if (!item_less(&it, &h->items[p]))
			break;
		heap_place(h, i, h->items[p]);
		i = p;
	}
	heap_place(h, i, it);
}

static void
sift_down(Heap *h, size_t i, HeapItem it)
{
	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && item_less(&h->items[c + 1], &h->items[c]))
			c++;
		if (!item_less(&h->items[c], &it))
			break;
		heap_place(h, i, h->items[c]);
		i = c;
	}
	heap_place(h, i, it);
}

/* node is the caller's handle (here: the task's number) */
static void
heap_insert(Heap *h, uint32_t node, uint64_t id, int64_t due)
{
	HeapItem	it = {due, h->seq++, node};

	h->ids[node] = id;
	sift_up(h, h->n++, it);
}

static void
heap_remove_at(Heap *h, size_t i)
{
	HeapItem	last = h->items[--h->n];

	if (i == h->n)
		return;
	if (i > 0 && item_less(&last, &h->items[(i - 1) / 2]))
		sift_up(h, i, last);
	else
		sift_down(h, i, last);
}

static void
heap_cancel(Heap *h, uint32_t node)
{
	heap_remove_at(h, h->pos[node]);
}

/* ----------------------------------------------------------------
 * Runs
 * ----------------------------------------------------------------
 */

typedef struct Result
{
	double		insert_ns;		/* into fresh memory (page faults included) */
	double		warm_ns;		/* into memory the structure already holds */
	double		cancel_ns;
	double		expiry_ns;
	double		bytes;
	double		deadline_ns;
} Result;

static void
fail(const char *what)
{
	fprintf(stderr, "bench_wheel: %s\n", what);
	exit(1);
}

/*
 * Phases: cold insert, next_deadline, expiry over the hour, warm insert
 * (the pool keeps its chunks: a sentinel due at the horizon's end stays
 * live in the last one), cancel of everything.
 */
static void
run_wheel(size_t n, const int64_t *dues, const uint32_t *cancel_order,
		  Result *r)
{
	JfWheel    *w = jf_wheel_create(0, HOUR_MS, 0);
	uint32_t   *handles = malloc(n * sizeof(uint32_t));
	JfWheelExpired *out = malloc(BATCH * sizeof(JfWheelExpired));
	double		t0;
	size_t		fired = 0;
	uint64_t	acc = 0;
	int			reps = 1000000;
	uint32_t	sentinel;

	if (!w || !handles || !out)
		fail("out of memory");

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		if (jf_wheel_insert(w, i, dues[i], &handles[i]) != JF_WHEEL_OK)
			fail("wheel insert failed");
	r->insert_ns = (now_ns() - t0) / n;
	r->bytes = (double) jf_wheel_memory(w) / n;
	if (jf_wheel_insert(w, n, HOUR_MS, &sentinel) != JF_WHEEL_OK)
		fail("wheel insert failed");

	t0 = now_ns();
	for (int i = 0; i < reps; i++)
		acc += jf_wheel_next_deadline(w);
	r->deadline_ns = (now_ns() - t0) / reps;

	t0 = now_ns();
	for (int64_t t = STEP_MS;; t += STEP_MS)
	{
		size_t		got;

		if (t > HOUR_MS - 1)
			t = HOUR_MS - 1;
		do
		{
			got = jf_wheel_advance(w, t, out, BATCH);
			fired += got;
			if (got)
				acc += out[got - 1].id;
		} while (got == BATCH);
		if (t == HOUR_MS - 1)
			break;
	}
	r->expiry_ns = (now_ns() - t0) / n;
	if (fired != n || jf_wheel_count(w) != 1)
		fail("wheel expiry lost entries");

	/* the clock is now at the hour's end: same dues, shifted */
	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		if (jf_wheel_insert(w, i, HOUR_MS - 1 + dues[i], &handles[i]) != JF_WHEEL_OK)
			fail("wheel insert failed");
	r->warm_ns = (now_ns() - t0) / n;

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
	{
		uint32_t	k = cancel_order[i];

		if (!jf_wheel_cancel(w, handles[k], k))
			fail("wheel cancel failed");
	}
	r->cancel_ns = (now_ns() - t0) / n;
	if (!jf_wheel_cancel(w, sentinel, n) || jf_wheel_count(w) != 0)
		fail("wheel cancel failed");

	sink += acc;
	free(handles);
	free(out);
	jf_wheel_destroy(w);
}

static void
run_heap(size_t n, const int64_t *dues, const uint32_t *cancel_order,
		 Result *r)
{
	Heap		h;
	double		t0;
	size_t		fired = 0;
	uint64_t	acc = 0;
	int			reps = 1000000;

	if (!heap_init(&h, n))
		fail("out of memory");

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		heap_insert(&h, i, i, dues[i]);
	r->insert_ns = (now_ns() - t0) / n;
	r->bytes = (double) heap_memory(&h) / n;

	t0 = now_ns();
	for (int i = 0; i < reps; i++)
	{
		acc += h.n ? h.items[0].due : INT64_MAX;
		__asm__ volatile("" ::: "memory");
	}
	r->deadline_ns = (now_ns() - t0) / reps;

	t0 = now_ns();
	for (int64_t t = STEP_MS;; t += STEP_MS)
	{
		if (t > HOUR_MS - 1)
			t = HOUR_MS - 1;
		while (h.n > 0 && h.items[0].due <= t)
		{
			acc += h.ids[h.items[0].node];
			heap_remove_at(&h, 0);
			fired++;
		}
		if (t == HOUR_MS - 1)
			break;
	}
	r->expiry_ns = (now_ns() - t0) / n;
	if (fired != n)
		fail("heap expiry lost entries");

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		heap_insert(&h, i, i, HOUR_MS - 1 + dues[i]);
	r->warm_ns = (now_ns() - t0) / n;

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		heap_cancel(&h, cancel_order[i]);
	r->cancel_ns = (now_ns() - t0) / n;
	if (h.n != 0)
		fail("heap cancel failed");

	sink += acc;
	heap_free(&h);
}

/* Advancing over empty time must cost the same whatever its length. */
static void
empty_advance_cost(void)
{
	JfWheel    *w = jf_wheel_create(0, HOUR_MS, 0);
	JfWheelExpired out[1];
	int			reps = 1000000;
	double		t0,
				ms_ns,
				hour_ns;
	int64_t		t = 0;

	if (!w)
		fail("out of memory");
	t0 = now_ns();
	for (int i = 0; i < reps; i++)
		sink += jf_wheel_advance(w, ++t, out, 1);
	ms_ns = (now_ns() - t0) / reps;
	t0 = now_ns();
	for (int i = 0; i < reps; i++)
	{
		t += HOUR_MS;
		sink += jf_wheel_advance(w, t, out, 1);
	}
	hour_ns = (now_ns() - t0) / reps;
	printf("advance on an empty wheel: %.1f ns per 1 ms step, %.1f ns per 1 h step\n",
		   ms_ns, hour_ns);
	jf_wheel_destroy(w);
}

static void
print_row(const char *tasks, const char *order, const char *what,
		  const Result *r)
{
	printf("%-5s %-6s %-10s %8.1f %8.1f %8.1f %8.1f %7.1f %8.1f\n",
		   tasks, order, what, r->insert_ns, r->warm_ns, r->cancel_ns,
		   r->expiry_ns, r->bytes, r->deadline_ns);
}

static void
bench_size(size_t n, const char *label)
{
	int64_t    *dues = malloc(n * sizeof(int64_t));
	uint32_t   *order = malloc(n * sizeof(uint32_t));

	if (!dues || !order)
		fail("out of memory");

	for (int random_order = 0; random_order <= 1; random_order++)
	{
		Result		rw,
					rh,
					ratio;

		/* dues spread over the hour: sorted, or shuffled */
		for (size_t i = 0; i < n; i++)
			dues[i] = 1 + (int64_t) ((uint64_t) i * (HOUR_MS - 1) / n);
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		if (random_order)
		{
			for (size_t i = n - 1; i > 0; i--)
			{
				size_t		j = rnd() % (i + 1);
				int64_t		d = dues[i];
				uint32_t	o = order[i];

				dues[i] = dues[j];
				dues[j] = d;
				j = rnd() % (i + 1);
				order[i] = order[j];
				order[j] = o;
			}
		}

		run_wheel(n, dues, order, &rw);
		run_heap(n, dues, order, &rh);
		ratio.insert_ns = rw.insert_ns / rh.insert_ns;
		ratio.warm_ns = rw.warm_ns / rh.warm_ns;
		ratio.cancel_ns = rw.cancel_ns / rh.cancel_ns;
		ratio.expiry_ns = rw.expiry_ns / rh.expiry_ns;
		ratio.bytes = rw.bytes / rh.bytes;
		ratio.deadline_ns = rw.deadline_ns / rh.deadline_ns;
		print_row(label, random_order ? "random" : "due", "wheel", &rw);
		print_row(label, random_order ? "random" : "due", "heap", &rh);
		printf("%-5s %-6s %-10s %8.2f %8.2f %8.3f %8.3f %7.2f %8.1f\n",
			   label, random_order ? "random" : "due", "wheel/heap",
			   ratio.insert_ns, ratio.warm_ns, ratio.cancel_ns,
			   ratio.expiry_ns, ratio.bytes, ratio.deadline_ns);
		fflush(stdout);
	}
	free(dues);
	free(order);
}

int
main(int argc, char **argv)
{
	bool		quick = argc > 1 && strcmp(argv[1], "quick") == 0;

	printf("jobflow time wheel vs indexed binary heap; dues uniform over 1 h, "
		   "expiry in %d ms steps, batches of %d\n", STEP_MS, BATCH);
	printf("%-5s %-6s %-10s %8s %8s %8s %8s %7s %8s\n",
		   "tasks", "order", "structure", "insert", "insert", "cancel",
		   "expiry", "B/task", "next_dl");
	printf("%-5s %-6s %-10s %8s %8s %8s %8s %7s %8s\n",
		   "", "", "", "cold ns", "warm ns", "ns", "ns", "", "ns");
	bench_size(1000000, "1M");
	if (!quick)
		bench_size(10000000, "10M");
	empty_advance_cost();
	return 0;
}
