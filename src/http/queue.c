/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  Admission control of jobflow's HTTP dispatcher: per-host FIFOs.
 *
 * A submitted request waits here, in the FIFO of its host (the lower-case
 * scheme://host:port of its URL), until both the global cap and its host's
 * cap allow it to start; only then is its easy handle added to curl's
 * multi handle, so its timeout counts from the real start.
 *
 * Hosts live in a chained hash table and are dropped as soon as they have
 * nothing waiting and nothing in flight, so one-off hosts do not
 * accumulate.  Hosts that can start something (a waiting request and a
 * free slot) sit in a binary min-heap keyed by the sequence number of
 * their oldest waiting request: the next request started is the oldest
 * one whose host is not saturated, so a dead host full of hung requests
 * never holds back other hosts.  Heap capacity is reserved when a host is
 * created, so nothing on the way out of a request allocates.
 *
 *-------------------------------------------------------------------------
 */
#include "http/internal.h"
#include "core/hash.h"

struct JfHost
{
	JfHost	   *hnext;			/* hash chain */
	uint32_t	hash;
	int			active;			/* requests of this host in flight */
	int			heap_idx;		/* -1 when not in the heap */
	JfReq	   *head;			/* waiting requests, oldest first */
	JfReq	   *tail;
	char		key[];
};

/* Hosts in the heap always have a waiting request: order by the oldest. */
static bool
heap_less(const JfHost *a, const JfHost *b)
{
	return a->head->seq < b->head->seq;
}

/* Every move keeps the host's own index in step, for O(log n) removal. */
static void
heap_place(JfHttp *h, size_t i, JfHost *host)
{
	h->heap[i] = host;
	host->heap_idx = (int) i;
}

/* Standard binary-heap moves; the root is the host to start next. */
static void
heap_sift_up(JfHttp *h, size_t i)
{
	JfHost	   *x = h->heap[i];

	while (i > 0)
	{
		size_t		parent = (i - 1) / 2;

		if (!heap_less(x, h->heap[parent]))
			break;
		heap_place(h, i, h->heap[parent]);
		i = parent;
	}
	heap_place(h, i, x);
}

static void
heap_sift_down(JfHttp *h, size_t i)
{
	JfHost	   *x = h->heap[i];

	for (;;)
	{
		size_t		c = 2 * i + 1;

		if (c >= h->heap_len)
			break;
		if (c + 1 < h->heap_len && heap_less(h->heap[c + 1], h->heap[c]))
			c++;
		if (!heap_less(h->heap[c], x))
			break;
		heap_place(h, i, h->heap[c]);
		i = c;
	}
	heap_place(h, i, x);
}

/*
 * Re-establish "host is in the heap iff it has a waiting request and a
 * free slot", and its position, after anything about it changed.  Never
 * allocates: heap capacity is reserved when the host is created.
 */
static void
heap_fix(JfHttp *h, JfHost *host)
{
	bool		want = host->head != NULL && host->active < h->max_per_host;

	if (want && host->heap_idx < 0)
	{
		heap_place(h, h->heap_len++, host);
		heap_sift_up(h, h->heap_len - 1);
	}
	else if (!want && host->heap_idx >= 0)
	{
		size_t		i = (size_t) host->heap_idx;
		JfHost	   *last = h->heap[--h->heap_len];

		host->heap_idx = -1;
		if (i < h->heap_len)
		{
			heap_place(h, i, last);
			heap_sift_up(h, i);
			heap_sift_down(h, (size_t) last->heap_idx);
		}
	}
	else if (want)
	{
		heap_sift_up(h, (size_t) host->heap_idx);
		heap_sift_down(h, (size_t) host->heap_idx);
	}
}

/* Chains stay short as hosts come and go; failing to grow is harmless. */
static void
host_rehash(JfHttp *h)
{
	size_t		n = h->nbuckets * 2;
	JfHost	  **nb = calloc(n, sizeof(JfHost *));

	if (nb == NULL)
		return;					/* keep the old table: longer chains only */
	for (size_t i = 0; i < h->nbuckets; i++)
	{
		JfHost	   *x = h->buckets[i];

		while (x)
		{
			JfHost	   *next = x->hnext;

			x->hnext = nb[x->hash & (n - 1)];
			nb[x->hash & (n - 1)] = x;
			x = next;
		}
	}
	free(h->buckets);
	h->buckets = nb;
	h->nbuckets = n;
}

/* Find or create a host entry; NULL only on OOM. */
static JfHost *
host_get(JfHttp *h, const char *key)
{
	uint32_t	hv = jf_hash_string(key);
	JfHost	   *x;
	size_t		klen;

	for (x = h->buckets[hv & (h->nbuckets - 1)]; x; x = x->hnext)
		if (x->hash == hv && strcmp(x->key, key) == 0)
			return x;

	if (h->heap_cap < h->nhosts + 1)
	{
		size_t		ncap = h->heap_cap ? h->heap_cap * 2 : 64;
		JfHost	  **nh = realloc(h->heap, ncap * sizeof(JfHost *));

		if (nh == NULL)
			return NULL;
		h->heap = nh;
		h->heap_cap = ncap;
	}
	klen = strlen(key);
	x = malloc(sizeof(JfHost) + klen + 1);
	if (x == NULL)
		return NULL;
	memcpy(x->key, key, klen + 1);
	x->hash = hv;
	x->active = 0;
	x->heap_idx = -1;
	x->head = x->tail = NULL;
	x->hnext = h->buckets[hv & (h->nbuckets - 1)];
	h->buckets[hv & (h->nbuckets - 1)] = x;
	h->nhosts++;
	if (h->nhosts > h->nbuckets)
		host_rehash(h);
	return x;
}

/* Hosts are dropped when idle so that one-off hosts do not accumulate. */
static void
host_maybe_free(JfHttp *h, JfHost *host)
{
	JfHost	  **pp;

	if (host->active > 0 || host->head != NULL)
		return;
	for (pp = &h->buckets[host->hash & (h->nbuckets - 1)]; *pp; pp = &(*pp)->hnext)
	{
		if (*pp == host)
		{
			*pp = host->hnext;
			break;
		}
	}
	h->nhosts--;
	free(host);
}

/* ---------------------------------------------------------------------
 * Entry points for http.c and request.c
 * ---------------------------------------------------------------------
 */

/* The host table starts small: most workers call a handful of hosts. */
bool
jf_http_queue_init(JfHttp *h)
{
	h->nbuckets = 64;
	h->buckets = calloc(h->nbuckets, sizeof(JfHost *));
	return h->buckets != NULL;
}

/*
 * Free every host, and hand back the requests still waiting in them,
 * chained by next, for the caller to free (no results for them: the
 * dispatcher is going away).  Requests in flight are the caller's; their
 * hosts go too, whatever their count.
 */
JfReq *
jf_http_queue_destroy(JfHttp *h)
{
	JfReq	   *waiting = NULL;

	if (h->buckets == NULL)
		return NULL;
	for (size_t i = 0; i < h->nbuckets; i++)
	{
		JfHost	   *x = h->buckets[i];

		while (x)
		{
			JfHost	   *next = x->hnext;

			while (x->head)
			{
				JfReq	   *r = x->head;

				x->head = r->next;
				r->next = waiting;
				waiting = r;
			}
			free(x);
			x = next;
		}
	}
	free(h->buckets);
	h->buckets = NULL;
	free(h->heap);
	h->heap = NULL;
	return waiting;
}

/* Waiting requests are exactly those never handed to curl. */
void
jf_http_foreach_queued(const JfHttp *h, void (*fn) (void *user, void *arg),
					   void *arg)
{
	if (h->buckets == NULL)
		return;
	for (size_t i = 0; i < h->nbuckets; i++)
	{
		for (const JfHost *x = h->buckets[i]; x != NULL; x = x->hnext)
		{
			for (const JfReq *r = x->head; r != NULL; r = r->next)
				fn(r->res.user, arg);
		}
	}
}

/*
 * Queue r at the end of its host's FIFO, stamping its submission order.
 * false only on OOM, with r untouched (the caller still owns it).
 */
bool
jf_http_queue_push(JfHttp *h, JfReq *r, const char *key)
{
	JfHost	   *host = host_get(h, key);

	if (host == NULL)
		return false;
	r->seq = h->next_seq++;
	r->host = host;
	if (host->tail)
		host->tail->next = r;
	else
		host->head = r;
	host->tail = r;
	h->nqueued++;
	heap_fix(h, host);
	return true;
}

/*
 * Take the oldest waiting request whose host has a free slot, and take
 * that slot for it; NULL when no host can start anything.  The global cap
 * is the caller's to check.
 */
JfReq *
jf_http_queue_pop(JfHttp *h)
{
	JfHost	   *host;
	JfReq	   *r;

	if (h->heap_len == 0)
		return NULL;
	host = h->heap[0];
	r = host->head;
	host->head = r->next;
	if (host->head == NULL)
		host->tail = NULL;
	r->next = NULL;
	h->nqueued--;
	host->active++;
	heap_fix(h, host);
	return r;
}

/*
 * Give back the host slot of a request that has finished (or failed to
 * start).  Its host may become startable again, or idle and dropped.
 */
void
jf_http_queue_release(JfHttp *h, JfReq *r)
{
	JfHost	   *host = r->host;

	if (host == NULL)
		return;
	r->host = NULL;
	host->active--;
	heap_fix(h, host);
	host_maybe_free(h, host);
}

/* The per-host cap decides heap membership: re-check every host. */
void
jf_http_queue_recheck(JfHttp *h)
{
	for (size_t i = 0; i < h->nbuckets; i++)
		for (JfHost *x = h->buckets[i]; x; x = x->hnext)
			heap_fix(h, x);
}
