/*-------------------------------------------------------------------------
 *
 * secrets.h
 *	  Named secrets of header values, bound to origins (secrets.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_SECRETS_H
#define JOBFLOW_SECRETS_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/array.h"

/*
 * ERROR unless each name in names is a secret of owner that may be sent
 * to the origin of url; locks those secrets until the end of the
 * transaction.
 */
extern void jf_check_secret_refs(List *names, Oid owner, const char *url);

/*
 * The origins given for a secret (or a client certificate: what names it
 * in messages; https_only refuses plain http), checked and normalised as
 * the worker keys origins: a sorted TEXTOID array without duplicates.
 */
extern ArrayType *jf_secret_origins(ArrayType *given, const char *what, bool https_only);

#endif							/* JOBFLOW_SECRETS_H */
