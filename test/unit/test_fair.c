/*-------------------------------------------------------------------------
 *
 * test_fair.c
 *	  Unit tests of the fair-share picker (src/fair.c): origins, due order
 *	  within a queue, per-origin, per-owner and global limits, round-robin
 *	  among queues, stale entries, and nothing claimed beyond what can be
 *	  sent at once.
 *
 *-------------------------------------------------------------------------
 */
#include "fair.h"
#include "unit.h"

#include <string.h>

#define MAXPICK 20000

static JfFairPick picks[MAXPICK];

static JfFairConfig
config(int in_flight, int per_host, int per_owner)
{
	JfFairConfig c;

	c.max_in_flight = in_flight;
	c.max_per_host = per_host;
	c.max_per_owner = per_owner;
	return c;
}

static void
test_origin(void)
{
	char		buf[300];

	CHECK(jf_fair_origin("http://Example.COM/x?y", buf, sizeof(buf)));
	CHECKF(strcmp(buf, "http://example.com:80") == 0, "%s", buf);
	CHECK(jf_fair_origin("HTTPS://a.b:8443", buf, sizeof(buf)));
	CHECKF(strcmp(buf, "https://a.b:8443") == 0, "%s", buf);
	CHECK(jf_fair_origin("https://a.b/", buf, sizeof(buf)));
	CHECKF(strcmp(buf, "https://a.b:443") == 0, "%s", buf);
	CHECK(jf_fair_origin("http://[::1]:0080/p", buf, sizeof(buf)));
	CHECKF(strcmp(buf, "http://[::1]:80") == 0, "%s", buf);
	CHECK(jf_fair_origin("http://h#frag", buf, sizeof(buf)));
	CHECKF(strcmp(buf, "http://h:80") == 0, "%s", buf);
	CHECK(!jf_fair_origin("no-scheme", buf, sizeof(buf)));
	CHECK(!jf_fair_origin("http://h:99999/", buf, sizeof(buf)));
	CHECK(!jf_fair_origin("http://h/", buf, 5));
}

/* One origin, one owner: due order, and no more than the cap while silent. */
static void
test_cap_and_order(void)
{
	JfFairConfig c = config(512, 8, 100);
	JfFair	   *f = jf_fair_create(&c);
	uint32_t	q = jf_fair_queue(f, 10, "http://slow:1/");
	int			n;
	int			k;

	CHECK(q == jf_fair_queue(f, 10, "HTTP://SLOW:1/other"));
	for (k = 0; k < 50; k++)
		CHECK(jf_fair_push(f, q, 1000 + k));
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECKF(n == 8, "picked %d", n);
	for (k = 0; k < n; k++)
		CHECK(picks[k].id == (uint64_t) (1000 + k) && picks[k].queue == q);
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 0);
	CHECK(jf_fair_parked(f) == 42 && jf_fair_claimed(f) == 8);
	/* a release (claim did not take it) frees a place but earns no depth */
	jf_fair_release(f, q);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECK(n == 1 && picks[0].id == 1008);
	jf_fair_destroy(f);
}

/* Slow origins of one tenant never take what another tenant's host needs. */
static void
test_slow_hosts_leave_room(void)
{
	JfFairConfig c = config(4096, 64, 1024);
	JfFair	   *f = jf_fair_create(&c);
	char		url[64];
	int			h;
	int			k;
	int			n;
	int			victim = 0;
	uint32_t	vq;

	/* 100 slow ports of owner 1, 1000 due tasks each, all before the victim's */
	for (h = 0; h < 100; h++)
	{
		uint32_t	q;

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow", 20000 + h);
		q = jf_fair_queue(f, 1, url);
		for (k = 0; k < 1000; k++)
			jf_fair_push(f, q, (uint64_t) h * 1000 + k);
	}
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECKF(n == 1024, "owner 1 holds %d", n);
	/* nothing comes back; the victim's task falls due after all that */
	vq = jf_fair_queue(f, 2, "http://127.0.0.1:8080/fast");
	jf_fair_push(f, vq, 999999);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	for (k = 0; k < n; k++)
		victim += picks[k].id == 999999;
	CHECKF(n == 1 && victim == 1, "n %d victim %d", n, victim);

	/* the same tenant's own fast host: its slow ports hold 10 x 64 only */
	jf_fair_destroy(f);
	f = jf_fair_create(&c);
	for (h = 0; h < 10; h++)
	{
		uint32_t	q;

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow", 20000 + h);
		q = jf_fair_queue(f, 1, url);
		for (k = 0; k < 1000; k++)
			jf_fair_push(f, q, (uint64_t) h * 1000 + k);
	}
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 640);
	vq = jf_fair_queue(f, 1, "http://127.0.0.1:8080/fast");
	jf_fair_push(f, vq, 999999);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECK(n == 1 && picks[0].id == 999999);
	jf_fair_destroy(f);
}

/* A backlog and a newcomer: each pass serves both; the global cap holds. */
static void
test_round_robin_and_global(void)
{
	JfFairConfig c = config(100, 1000, 1000);
	JfFair	   *f = jf_fair_create(&c);
	uint32_t	big = jf_fair_queue(f, 1, "http://big/");
	uint32_t	small = jf_fair_queue(f, 2, "http://small/");
	int			k;
	int			n;
	int			nsmall = 0;

	for (k = 0; k < 5000; k++)
		jf_fair_push(f, big, k);
	for (k = 0; k < 10; k++)
		jf_fair_push(f, small, 100000 + k);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECKF(n == 100, "global cap: picked %d", n);
	for (k = 0; k < n; k++)
		nsmall += picks[k].queue == small;
	CHECKF(nsmall == 10, "small got %d", nsmall);
	/* due order within each queue */
	for (k = 1; k < n; k++)
		if (picks[k].queue == picks[k - 1].queue)
			CHECK(picks[k].id > picks[k - 1].id);
	jf_fair_destroy(f);
}

static bool
take_even(uint64_t id, void *arg)
{
	(*(int *) arg)++;
	return id % 2 == 0;
}

/* Stale entries are dropped without using a place. */
static void
test_stale(void)
{
	JfFairConfig c = config(100, 5, 100);
	JfFair	   *f = jf_fair_create(&c);
	uint32_t	q = jf_fair_queue(f, 1, "http://h/");
	int			asked = 0;
	int			k;
	int			n;

	for (k = 0; k < 20; k++)
		jf_fair_push(f, q, k);
	n = jf_fair_pick(f, picks, MAXPICK, take_even, &asked);
	CHECK(n == 5 && asked == 9);
	for (k = 0; k < n; k++)
		CHECK(picks[k].id == (uint64_t) (2 * k));
	jf_fair_destroy(f);
}

/* Claimed means sendable now: a finished request makes room for one more. */
static void
test_claimed_is_sendable(void)
{
	JfFairConfig c = config(10000, 10, 10000);
	JfFair	   *f = jf_fair_create(&c);
	uint32_t	q = jf_fair_queue(f, 1, "http://fast/");
	int			k;
	int			n;

	for (k = 0; k < 5000; k++)
		jf_fair_push(f, q, k);
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 10);
	for (k = 0; k < 3; k++)
		jf_fair_release(f, q);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECKF(n == 3, "after 3 answers: %d", n);
	CHECK(picks[0].id == 10 && picks[2].id == 12);
	CHECK(jf_fair_claimed(f) == 10);
	/* a lowered cap applies to the next pick, never to what is claimed */
	c.max_per_host = 5;
	jf_fair_set_config(f, &c);
	for (k = 0; k < 4; k++)
		jf_fair_release(f, q);
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 0);
	jf_fair_release(f, q);
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 0);
	jf_fair_release(f, q);
	CHECK(jf_fair_pick(f, picks, MAXPICK, NULL, NULL) == 1);
	jf_fair_destroy(f);
}

/* Owners sharing one origin: neither can hold the other's callbacks. */
static void
test_shared_origin(void)
{
	JfFairConfig c = config(4096, 64, 1024);
	JfFair	   *f = jf_fair_create(&c);
	uint32_t	slow = jf_fair_queue(f, 1, "http://relay:80/slow");
	uint32_t	fast = jf_fair_queue(f, 2, "http://relay:80/fast");
	int			k;
	int			n;
	int			got_fast = 0;

	CHECK(slow != fast);
	for (k = 0; k < 500; k++)
		jf_fair_push(f, slow, k);
	CHECKF((n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL)) == 64, "%d", n);
	/* the origin is full of owner 1's requests; owner 2 still gets one now */
	for (k = 0; k < 10; k++)
		jf_fair_push(f, fast, 1000 + k);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	CHECKF(n == 1 && picks[0].queue == fast, "n %d", n);
	/* as owner 1's requests finish, places go to owner 2 up to half */
	for (k = 0; k < 40; k++)
		jf_fair_release(f, slow);
	n = jf_fair_pick(f, picks, MAXPICK, NULL, NULL);
	for (k = 0; k < n; k++)
		got_fast += picks[k].queue == fast;
	CHECKF(got_fast == 9, "owner 2 got %d more", got_fast);
	/* owner 1 up to its share: 64 / 2 - 24 */
	CHECKF(n - got_fast == 8, "owner 1 took %d", n - got_fast);
	jf_fair_destroy(f);
}

int
main(void)
{
	test_origin();
	test_cap_and_order();
	test_slow_hosts_leave_room();
	test_round_robin_and_global();
	test_stale();
	test_claimed_is_sendable();
	test_shared_origin();
	return unit_done("test_fair");
}
