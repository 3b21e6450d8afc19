/*-------------------------------------------------------------------------
 *
 * unit.h
 *	  What every jobflow unit test program shares: checks and the verdict.
 *
 * A unit test is a plain C program linked with the module it tests.  It
 * counts its checks with CHECK (or CHECKF, which adds a printf-style
 * explanation), and ends with "return unit_done("test_NAME");", which
 * prints the one line CI looks for,
 *
 *		test_NAME: N passed, M failed
 *
 * and gives the exit status (non-zero on any failure).  Failures are
 * reported on stderr as they happen, the first 30 in full.  Also here: a
 * seeded xorshift64* generator, so that randomised runs are reproducible.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_UNIT_H
#define JF_UNIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define UNIT_MAX_REPORTED 30

static long unit_passed;
static long unit_failed;

/*
 * Count a failure; true if it should be reported in full (so a run gone
 * wrong everywhere does not bury the first, telling, failures).
 */
static inline bool
unit_fail(const char *file, int line, const char *cond)
{
	unit_failed++;
	if (unit_failed > UNIT_MAX_REPORTED)
		return false;
	fprintf(stderr, "FAIL %s:%d: %s\n", file, line, cond);
	return true;
}

#define CHECK(cond) \
	do { \
		if (cond) \
			unit_passed++; \
		else \
			(void) unit_fail(__FILE__, __LINE__, #cond); \
	} while (0)

#define CHECKF(cond, ...) \
	do { \
		if (cond) \
			unit_passed++; \
		else if (unit_fail(__FILE__, __LINE__, #cond)) \
		{ \
			fprintf(stderr, "  "); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
		} \
	} while (0)

/*
 * The verdict line is the program's last output, and CI reads it: exactly
 * one such line per program.
 */
static inline int
unit_done(const char *name)
{
	if (unit_failed > UNIT_MAX_REPORTED)
		fprintf(stderr, "(%ld more failures not shown)\n",
				unit_failed - UNIT_MAX_REPORTED);
	fflush(stderr);
	printf("%s: %ld passed, %ld failed\n", name, unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}

/* xorshift64*: deterministic; a program may reseed unit_rng_state */
static uint64_t unit_rng_state = 88172645463325252ULL;

static inline uint64_t
unit_rnd64(void)
{
	unit_rng_state ^= unit_rng_state >> 12;
	unit_rng_state ^= unit_rng_state << 25;
	unit_rng_state ^= unit_rng_state >> 27;
	return unit_rng_state * 2685821657736338717ULL;
}

#endif							/* JF_UNIT_H */
