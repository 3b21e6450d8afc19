/*-------------------------------------------------------------------------
 *
 * test_circuit.c
 *	  Unit tests of the circuits per (owner, origin) (src/core/circuit.c)
 *	  and of the fair share's gate that holds an open circuit's tasks.
 *
 *-------------------------------------------------------------------------
 */
#include "core/circuit.h"
#include "core/fair.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>

#define O "http://a:80"

static JfCircuitConfig
config(void)
{
	JfCircuitConfig c = {3, 60000, 1000, 4000};

	return c;
}

/* N failures in the window open; a success before closes the count. */
static void
test_opening(void)
{
	JfCircuitConfig cfg = config();
	JfCircuits *c = jf_circuits_create(&cfg);

	CHECK(jf_circuits_room(c, 1, O, 0) == -1);
	CHECK(!jf_circuits_result(c, 1, O, 1, JF_CIRCUIT_FAILURE, 0));
	CHECK(!jf_circuits_result(c, 1, O, 2, JF_CIRCUIT_FAILURE, 10));
	/* an answer: counted from zero again */
	CHECK(!jf_circuits_result(c, 1, O, 3, JF_CIRCUIT_SUCCESS, 20));
	CHECK(jf_circuits_count(c) == 0);
	CHECK(!jf_circuits_result(c, 1, O, 4, JF_CIRCUIT_FAILURE, 30));
	CHECK(!jf_circuits_result(c, 1, O, 5, JF_CIRCUIT_NEUTRAL, 35));
	CHECK(!jf_circuits_result(c, 1, O, 6, JF_CIRCUIT_FAILURE, 40));
	CHECK(jf_circuits_result(c, 1, O, 7, JF_CIRCUIT_FAILURE, 50));	/* opens */
	CHECK(jf_circuits_open(c) == 1);
	CHECK(jf_circuits_room(c, 1, O, 60) == 0);
	/* another owner, another origin: not held */
	CHECK(jf_circuits_room(c, 2, O, 60) == -1);
	CHECK(jf_circuits_room(c, 1, "http://b:80", 60) == -1);
	/* failures spread beyond the window never open */
	CHECK(!jf_circuits_result(c, 2, O, 8, JF_CIRCUIT_FAILURE, 0));
	CHECK(!jf_circuits_result(c, 2, O, 9, JF_CIRCUIT_FAILURE, 30000));
	CHECK(!jf_circuits_result(c, 2, O, 10, JF_CIRCUIT_FAILURE, 70000));
	CHECK(jf_circuits_room(c, 2, O, 70000) == -1);
	jf_circuits_destroy(c);
}

/* Probes at growing intervals; a successful probe closes. */
static void
test_probes(void)
{
	JfCircuitConfig cfg = config();
	JfCircuits *c = jf_circuits_create(&cfg);
	int			k;

	for (k = 0; k < 3; k++)
		(void) jf_circuits_result(c, 1, O, k, JF_CIRCUIT_FAILURE, 0);
	CHECK(jf_circuits_next_probe(c, 0) == 1000);
	CHECK(jf_circuits_room(c, 1, O, 999) == 0);
	CHECK(jf_circuits_room(c, 1, O, 1000) == 1);
	jf_circuits_taken(c, 1, O, 100, 1000);
	CHECK(jf_circuits_room(c, 1, O, 1001) == 0);	/* one probe at a time */
	/* a failure of another request changes nothing; the probe's reopens */
	CHECK(!jf_circuits_result(c, 1, O, 99, JF_CIRCUIT_FAILURE, 1100));
	CHECK(jf_circuits_room(c, 1, O, 5000) == 0);
	(void) jf_circuits_result(c, 1, O, 100, JF_CIRCUIT_FAILURE, 1200);
	CHECK(jf_circuits_next_probe(c, 1200) == 3200);	/* twice as long */
	jf_circuits_taken(c, 1, O, 101, 3200);
	(void) jf_circuits_result(c, 1, O, 101, JF_CIRCUIT_FAILURE, 3300);
	CHECK(jf_circuits_next_probe(c, 3300) == 7300);	/* the most: 4 s */
	jf_circuits_taken(c, 1, O, 102, 7300);
	(void) jf_circuits_result(c, 1, O, 102, JF_CIRCUIT_FAILURE, 7400);
	CHECK(jf_circuits_next_probe(c, 7400) == 11400);
	/* a probe not sent: another may go at once */
	jf_circuits_taken(c, 1, O, 103, 11400);
	jf_circuits_unsent(c, 1, O, 103, 11500);
	CHECK(jf_circuits_room(c, 1, O, 11500) == 1);
	/* a passed probe time is no deadline: the loop must not spin */
	CHECK(jf_circuits_next_probe(c, 11600) == INT64_MAX);
	jf_circuits_taken(c, 1, O, 104, 11600);
	CHECK(jf_circuits_result(c, 1, O, 104, JF_CIRCUIT_SUCCESS, 11700));
	CHECK(jf_circuits_open(c) == 0 && jf_circuits_count(c) == 0);
	CHECK(jf_circuits_room(c, 1, O, 11800) == -1);
	jf_circuits_destroy(c);
}

/* Resets, the list, and turning circuits off. */
static void
test_reset_and_list(void)
{
	JfCircuitConfig cfg = config();
	JfCircuits *c = jf_circuits_create(&cfg);
	JfCircuitInfo info[8];
	int			k;
	int			n;

	for (k = 0; k < 3; k++)
	{
		(void) jf_circuits_result(c, 1, O, k, JF_CIRCUIT_FAILURE, 0);
		(void) jf_circuits_result(c, 2, O, k, JF_CIRCUIT_FAILURE, 0);
	}
	(void) jf_circuits_result(c, 3, O, 9, JF_CIRCUIT_FAILURE, 0);
	n = jf_circuits_list(c, info, 8, 10);
	CHECK(n == 3);
	CHECK(info[0].state == JF_CIRCUIT_OPEN && info[1].state == JF_CIRCUIT_OPEN);
	CHECK(info[2].state == JF_CIRCUIT_CLOSED && info[2].owner == 3 && info[2].failures == 1);
	{
		uint32_t	closed[2] = {0, 0};

		CHECK(jf_circuits_reset(c, 1, O, closed, 2) == 1 && closed[0] == 1);
	}
	CHECK(jf_circuits_room(c, 1, O, 20) == -1);
	CHECK(jf_circuits_room(c, 2, O, 20) == 0);
	{
		uint32_t	closed[2] = {0, 0};

		CHECK(jf_circuits_reset(c, 0, O, closed, 2) == 1 && closed[0] == 2);	/* every owner's */
	}
	CHECK(jf_circuits_open(c) == 0);
	/* a closed count older than the window is forgotten */
	CHECK(jf_circuits_list(c, info, 8, 61000) == 0);
	CHECK(jf_circuits_count(c) == 0);
	for (k = 0; k < 3; k++)
		(void) jf_circuits_result(c, 1, O, k, JF_CIRCUIT_FAILURE, 0);
	cfg.failures = 0;
	jf_circuits_set_config(c, &cfg);
	CHECK(jf_circuits_count(c) == 0 && jf_circuits_room(c, 1, O, 1) == -1);
	CHECK(!jf_circuits_result(c, 1, O, 5, JF_CIRCUIT_FAILURE, 1));
	CHECK(jf_circuits_count(c) == 0);
	jf_circuits_destroy(c);
}

/*
 * More circuits than fit: shared out among owners, each owner's open ones
 * first, so that owner 1's hundred open circuits hide neither owner 2's
 * open one nor owner 3's counting one.
 */
static void
test_list_shared(void)
{
	JfCircuitConfig cfg = config();
	JfCircuits *c = jf_circuits_create(&cfg);
	JfCircuitInfo info[8];
	char		origin[32];
	int			k;
	int			j;
	int			n;
	int			ones = 0;
	int			twos = 0;
	int			threes = 0;

	for (k = 0; k < 100; k++)
	{
		snprintf(origin, sizeof(origin), "http://h%d:80", k);
		for (j = 0; j < 3; j++)
			(void) jf_circuits_result(c, 1, origin, j, JF_CIRCUIT_FAILURE, k);
	}
	for (j = 0; j < 3; j++)
		(void) jf_circuits_result(c, 2, O, j, JF_CIRCUIT_FAILURE, 500);
	(void) jf_circuits_result(c, 3, O, 9, JF_CIRCUIT_FAILURE, 500);
	n = jf_circuits_list(c, info, 8, 1000);
	CHECK(n == 8);
	for (k = 0; k < n; k++)
	{
		ones += info[k].owner == 1;
		twos += info[k].owner == 2 && info[k].state == JF_CIRCUIT_OPEN;
		threes += info[k].owner == 3 && info[k].state == JF_CIRCUIT_CLOSED;
	}
	CHECKF(twos == 1 && ones == 6 && threes == 1, "%d %d %d", ones, twos, threes);
	CHECK(jf_circuits_count(c) == 102);	/* listed, not forgotten */
	jf_circuits_destroy(c);

	/* few open ones: all listed, then the counting ones of each owner */
	c = jf_circuits_create(&cfg);
	for (k = 0; k < 20; k++)
	{
		snprintf(origin, sizeof(origin), "http://h%d:80", k);
		(void) jf_circuits_result(c, 1, origin, 1, JF_CIRCUIT_FAILURE, k);
	}
	for (j = 0; j < 3; j++)
		(void) jf_circuits_result(c, 2, O, j, JF_CIRCUIT_FAILURE, 500);
	(void) jf_circuits_result(c, 3, O, 9, JF_CIRCUIT_FAILURE, 500);
	n = jf_circuits_list(c, info, 8, 1000);
	CHECK(n == 8);
	CHECK(info[0].owner == 2 && info[0].state == JF_CIRCUIT_OPEN);
	ones = threes = 0;
	for (k = 1; k < n; k++)
	{
		ones += info[k].owner == 1;
		threes += info[k].owner == 3;
	}
	CHECKF(ones == 6 && threes == 1, "%d %d", ones, threes);
	jf_circuits_destroy(c);
}

/* The fair share asks the gate: held tasks stay parked, a probe goes. */
static JfCircuits *gate_circuits;
static int64_t gate_now;

static int
gate(uint32_t owner, const char *origin, void *arg __attribute__((unused)))
{
	return jf_circuits_room(gate_circuits, owner, origin, gate_now);
}

static void
taken(uint32_t owner, const char *origin, uint64_t id, void *arg __attribute__((unused)))
{
	jf_circuits_taken(gate_circuits, owner, origin, id, gate_now);
}

static void
test_fair_gate(void)
{
	JfFairConfig fc = {100, 10, 100, 0};
	JfCircuitConfig cfg = config();
	JfFair	   *f = jf_fair_create(&fc);
	JfFairPick	picks[16];
	uint32_t	a = jf_fair_queue(f, 1, NULL, "http://a/x");
	uint32_t	b = jf_fair_queue(f, 2, NULL, "http://a/y");
	int			k;
	int			n;

	gate_circuits = jf_circuits_create(&cfg);
	jf_fair_set_gate(f, gate, taken, NULL);
	for (k = 0; k < 3; k++)
		(void) jf_circuits_result(gate_circuits, 1, O, k, JF_CIRCUIT_FAILURE, 0);
	CHECK(strcmp(jf_fair_lane_origin(f, a), O) == 0);
	CHECK(jf_fair_owner_of(f, a) == 1);
	for (k = 0; k < 5; k++)
	{
		CHECK(jf_fair_push(f, a, 10 + k, 0));
		CHECK(jf_fair_push(f, b, 20 + k, 0));
	}
	gate_now = 10;
	n = jf_fair_pick(f, picks, 16, 0, NULL, NULL);
	CHECK(n == 5);				/* owner 2's only */
	for (k = 0; k < n; k++)
		CHECK(picks[k].queue == b);
	{
		uint32_t	owners[3] = {1, 2, 1};
		const char *origins[3] = {O, O, "http://b:80"};
		size_t		held[3];

		jf_fair_parked_of(f, 3, owners, origins, held);
		CHECK(held[0] == 5 && held[1] == 0 && held[2] == 0);
	}
	gate_now = 1000;
	n = jf_fair_pick(f, picks, 16, 1, NULL, NULL);
	CHECKF(n == 1 && picks[0].id == 10, "n %d", n);	/* the probe */
	n = jf_fair_pick(f, picks, 16, 2, NULL, NULL);
	CHECK(n == 0);
	CHECK(jf_circuits_result(gate_circuits, 1, O, 10, JF_CIRCUIT_SUCCESS, 1100));
	n = jf_fair_pick(f, picks, 16, 3, NULL, NULL);
	CHECK(n == 4);				/* drained */
	jf_circuits_destroy(gate_circuits);
	jf_fair_destroy(f);
}

int
main(void)
{
	test_opening();
	test_probes();
	test_reset_and_list();
	test_list_shared();
	test_fair_gate();
	return unit_done("test_circuit");
}
