/*-------------------------------------------------------------------------
 *
 * url_check.h
 *	  What a callback URL may be (url_check.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_URL_CHECK_H
#define JOBFLOW_URL_CHECK_H

#include "postgres.h"

/*
 * Refuse (22023) a callback URL that is not an absolute http(s) URL with a
 * valid host and nothing that could smuggle a request line or credentials.
 */
extern void jf_check_url(const char *url);

#endif							/* JOBFLOW_URL_CHECK_H */
