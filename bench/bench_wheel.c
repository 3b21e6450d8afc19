/*-------------------------------------------------------------------------
 *
 * bench_wheel.c
 *	  Benchmark of the timing wheel (src/core/wheel.c) against a binary heap.
 *
 * For 1M and 10M tasks whose dues are spread uniformly over a 1-hour
 * horizon, measures ns per insert, per cancel and per expiry, bytes per
 * task and the cost of next_deadline, once with the tasks inserted in due
 * order (what the worker's "ORDER BY run_at" load gives; cancels then go
 * in the same order) and once in random order (cancels in another random
 * order).  Two baselines, both written here and ordered like the wheel by
 * (due, insertion number):
 *	- "heap": an indexed binary min-heap in one array with the keys inline
 *	  (16-byte items) and a node->position table so that cancel is
 *	  O(log n).  This is about the strongest simple heap there is: sifting
 *	  compares keys in one contiguous array.
 *	- "heap-ptr": a pointer-linked binary heap of caller-owned nodes, as
 *	  timer heaps in event loops (libuv's, for one) are built: each node
 *	  has parent/left/right pointers and the key, and a sift swaps links.
 * Expiry walks the clock over the hour in 10 ms steps, collecting due
 * entries in batches of up to 4096 (per task it includes the per-call cost
 * of those 360000 advance calls).
 *
 * "cold" insert is the first fill of a new structure (its memory is
 * touched for the first time: page faults included); "warm" refills one
 * that already holds its memory.  The caller's own arrays (handles, dues)
 * are touched before timing.  Every figure is the median of several
 * repetitions (the machine may be shared); the header says how many.
 *
 * Usage: bench_wheel [quick] [reps N]	 ("quick" runs only 1M tasks)
 *
 *-------------------------------------------------------------------------
 */
#include "core/wheel.h"

#include <malloc.h>
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
 * Baseline 2: pointer-linked binary heap (caller-owned nodes)
 * ----------------------------------------------------------------
 */

typedef struct PNode
{
	int64_t		due;
	uint64_t	id;
	uint32_t	seq;
	struct PNode *left;
	struct PNode *right;
	struct PNode *parent;
} PNode;

typedef struct PHeap
{
	PNode	   *root;
	size_t		n;
	uint32_t	seq;
} PHeap;

static inline bool
pnode_less(const PNode *a, const PNode *b)
{
	return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

/* Exchange parent p and its child c in the tree (c takes p's place). */
static void
pheap_swap(PHeap *h, PNode *p, PNode *c)
{
	PNode	   *pp = p->parent;
	PNode	   *cl = c->left;
	PNode	   *cr = c->right;

	if (p->left == c)
	{
		c->left = p;
		c->right = p->right;
		if (c->right)
			c->right->parent = c;
	}
	else
	{
		c->right = p;
		c->left = p->left;
		if (c->left)
			c->left->parent = c;
	}
	p->left = cl;
	if (cl)
		cl->parent = p;
	p->right = cr;
	if (cr)
		cr->parent = p;
	p->parent = c;
	c->parent = pp;
	if (pp == NULL)
		h->root = c;
	else if (pp->left == p)
		pp->left = c;
	else
		pp->right = c;
}

/*
 * Node at 1-based position k of the complete tree (stop > 0: its ancestor
 * that many levels up): the bits of k below the top one spell the path.
 */
static PNode *
pheap_walk(const PHeap *h, size_t k, int stop)
{
	PNode	   *x = h->root;

	for (int b = 62 - __builtin_clzll(k); b >= stop; b--)
		x = ((k >> b) & 1) ? x->right : x->left;
	return x;
}

static void
pheap_insert(PHeap *h, PNode *x, uint64_t id, int64_t due)
{
	x->due = due;
	x->id = id;
	x->seq = h->seq++;
	x->left = x->right = NULL;
	if (++h->n == 1)
	{
		x->parent = NULL;
		h->root = x;
		return;
	}
	x->parent = pheap_walk(h, h->n, 1);
	if (h->n & 1)
		x->parent->right = x;
	else
		x->parent->left = x;
	while (x->parent && pnode_less(x, x->parent))
		pheap_swap(h, x->parent, x);
}

static void
pheap_remove(PHeap *h, PNode *x)
{
	PNode	   *last = pheap_walk(h, h->n, 0);

	h->n--;
	if (last == h->root)
	{
		h->root = NULL;			/* it was the only node, so x == last */
		return;
	}
	if (last->parent->left == last)
		last->parent->left = NULL;
	else
		last->parent->right = NULL;
	if (last == x)
		return;
	/* last takes x's place, then moves down or up */
	last->left = x->left;
	last->right = x->right;
	last->parent = x->parent;
	if (last->left)
		last->left->parent = last;
	if (last->right)
		last->right->parent = last;
	if (x->parent == NULL)
		h->root = last;
	else if (x->parent->left == x)
		x->parent->left = last;
	else
		x->parent->right = last;
	for (;;)
	{
		PNode	   *m = last;

		if (last->left && pnode_less(last->left, m))
			m = last->left;
		if (last->right && pnode_less(last->right, m))
			m = last->right;
		if (m == last)
			break;
		pheap_swap(h, last, m);
	}
	while (last->parent && pnode_less(last, last->parent))
		pheap_swap(h, last->parent, last);
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
	memset(handles, 0xff, n * sizeof(uint32_t));
	memset(out, 0, BATCH * sizeof(JfWheelExpired));

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

static void
run_pheap(size_t n, const int64_t *dues, const uint32_t *cancel_order,
		  Result *r)
{
	PHeap		h = {NULL, 0, 0};
	PNode	   *nodes = malloc(n * sizeof(PNode));
	double		t0;
	size_t		fired = 0;
	uint64_t	acc = 0;
	int			reps = 1000000;

	if (!nodes)
		fail("out of memory");

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		pheap_insert(&h, &nodes[i], i, dues[i]);
	r->insert_ns = (now_ns() - t0) / n;
	r->bytes = (double) (n * sizeof(PNode) + sizeof(PHeap)) / n;

	t0 = now_ns();
	for (int i = 0; i < reps; i++)
	{
		acc += h.root ? h.root->due : INT64_MAX;
		__asm__ volatile("" ::: "memory");
	}
	r->deadline_ns = (now_ns() - t0) / reps;

	t0 = now_ns();
	for (int64_t t = STEP_MS;; t += STEP_MS)
	{
		if (t > HOUR_MS - 1)
			t = HOUR_MS - 1;
		while (h.root && h.root->due <= t)
		{
			acc += h.root->id;
			pheap_remove(&h, h.root);
			fired++;
		}
		if (t == HOUR_MS - 1)
			break;
	}
	r->expiry_ns = (now_ns() - t0) / n;
	if (fired != n)
		fail("pointer heap expiry lost entries");

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		pheap_insert(&h, &nodes[i], i, HOUR_MS - 1 + dues[i]);
	r->warm_ns = (now_ns() - t0) / n;

	t0 = now_ns();
	for (size_t i = 0; i < n; i++)
		pheap_remove(&h, &nodes[cancel_order[i]]);
	r->cancel_ns = (now_ns() - t0) / n;
	if (h.n != 0 || h.root != NULL)
		fail("pointer heap cancel failed");

	sink += acc;
	free(nodes);
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
	printf("%-5s %-6s %-15s %8.1f %8.1f %8.1f %8.1f %7.1f %8.1f\n",
		   tasks, order, what, r->insert_ns, r->warm_ns, r->cancel_ns,
		   r->expiry_ns, r->bytes, r->deadline_ns);
}

/* wheel cost over baseline cost: < 1 means the wheel is cheaper */
static void
print_ratio(const char *tasks, const char *order, const char *what,
			const Result *w, const Result *b)
{
	printf("%-5s %-6s %-15s %8.2f %8.2f %8.3f %8.3f %7.2f %8.1f\n",
		   tasks, order, what, w->insert_ns / b->insert_ns,
		   w->warm_ns / b->warm_ns, w->cancel_ns / b->cancel_ns,
		   w->expiry_ns / b->expiry_ns, w->bytes / b->bytes,
		   w->deadline_ns / b->deadline_ns);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Per-column median of reps results (columns are independent). */
static void
median(const Result *runs, int reps, Result *out)
{
	double		v[64];

	for (size_t col = 0; col < sizeof(Result) / sizeof(double); col++)
	{
		for (int i = 0; i < reps; i++)
			v[i] = ((const double *) &runs[i])[col];
		qsort(v, reps, sizeof(double), cmp_double);
		((double *) out)[col] = (reps % 2) ? v[reps / 2] :
			(v[reps / 2 - 1] + v[reps / 2]) / 2;
	}
}

typedef void (*RunFn) (size_t, const int64_t *, const uint32_t *, Result *);

static void
run_median(RunFn fn, int reps, size_t n, const int64_t *dues,
		   const uint32_t *order, Result *out)
{
	Result		runs[64];

	for (int i = 0; i < reps; i++)
		fn(n, dues, order, &runs[i]);
	median(runs, reps, out);
}

/* the goals, for 1M tasks in due order */
static void
print_goals(const Result *w, const Result *h, const Result *p)
{
	printf("goals at 1M, due order (wheel median figures):\n");
	printf("  insert <= 10 ns:   warm %.1f %s, cold %.1f %s\n",
		   w->warm_ns, w->warm_ns <= 10 ? "met" : "MISSED",
		   w->insert_ns, w->insert_ns <= 10 ? "met" : "MISSED");
	printf("  cancel <= 20 ns:   %.1f %s\n", w->cancel_ns,
		   w->cancel_ns <= 20 ? "met" : "MISSED");
	printf("  expiry <= 50 ns:   %.1f %s\n", w->expiry_ns,
		   w->expiry_ns <= 50 ? "met" : "MISSED");
	printf("  <= 32 B per task:  %.1f %s\n", w->bytes,
		   w->bytes <= 32 ? "met" : "MISSED");
	printf("  >= 10x heap (keys inline) on cancel: %.1fx %s, on expiry: %.1fx %s\n",
		   h->cancel_ns / w->cancel_ns,
		   h->cancel_ns >= 10 * w->cancel_ns ? "met" : "MISSED",
		   h->expiry_ns / w->expiry_ns,
		   h->expiry_ns >= 10 * w->expiry_ns ? "met" : "MISSED");
	printf("  >= 10x heap-ptr (libuv-like) on cancel: %.1fx %s, on expiry: %.1fx %s\n",
		   p->cancel_ns / w->cancel_ns,
		   p->cancel_ns >= 10 * w->cancel_ns ? "met" : "MISSED",
		   p->expiry_ns / w->expiry_ns,
		   p->expiry_ns >= 10 * w->expiry_ns ? "met" : "MISSED");
}

static void
bench_size(size_t n, const char *label, int reps)
{
	int64_t    *dues = malloc(n * sizeof(int64_t));
	uint32_t   *order = malloc(n * sizeof(uint32_t));
	Result		goals_w = {0},
				goals_h = {0},
				goals_p = {0};

	if (!dues || !order)
		fail("out of memory");

	for (int random_order = 0; random_order <= 1; random_order++)
	{
		const char *ord = random_order ? "random" : "due";
		Result		rw,
					rh,
					rp;

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

		run_median(run_wheel, reps, n, dues, order, &rw);
		run_median(run_heap, reps, n, dues, order, &rh);
		run_median(run_pheap, reps, n, dues, order, &rp);
		print_row(label, ord, "wheel", &rw);
		print_row(label, ord, "heap", &rh);
		print_row(label, ord, "heap-ptr", &rp);
		print_ratio(label, ord, "wheel/heap", &rw, &rh);
		print_ratio(label, ord, "wheel/heap-ptr", &rw, &rp);
		fflush(stdout);
		if (!random_order)
		{
			goals_w = rw;
			goals_h = rh;
			goals_p = rp;
		}
	}
	if (n == 1000000)
		print_goals(&goals_w, &goals_h, &goals_p);
	free(dues);
	free(order);
}

int
main(int argc, char **argv)
{
	bool		quick = false;
	int			reps = 3;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "quick") == 0)
			quick = true;
		else if (strcmp(argv[i], "reps") == 0 && i + 1 < argc)
			reps = atoi(argv[++i]);
		else
			fail("usage: bench_wheel [quick] [reps N]");
	}
	if (reps < 1 || reps > 64)
		fail("reps must be 1..64");
	/*
	 * A fixed mmap threshold stops glibc from raising it after the first
	 * big free, which would let later repetitions of the baselines refill
	 * memory already faulted in: every "cold" fill must be cold.
	 */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);

	printf("jobflow time wheel vs binary heaps; dues uniform over 1 h, "
		   "expiry in %d ms steps, batches of %d; median of %d runs\n",
		   STEP_MS, BATCH, reps);
	printf("heap = array heap, keys inline + position table; "
		   "heap-ptr = pointer-linked heap of caller nodes (libuv-like)\n");
	printf("%-5s %-6s %-15s %8s %8s %8s %8s %7s %8s\n",
		   "tasks", "order", "structure", "insert", "insert", "cancel",
		   "expiry", "B/task", "next_dl");
	printf("%-5s %-6s %-15s %8s %8s %8s %8s %7s %8s\n",
		   "", "", "", "cold ns", "warm ns", "ns", "ns", "", "ns");
	bench_size(1000000, "1M", reps);
	if (!quick)
		bench_size(10000000, "10M", reps);
	empty_advance_cost();
	return 0;
}
