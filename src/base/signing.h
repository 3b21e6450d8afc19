/*-------------------------------------------------------------------------
 *
 * signing.h
 *	  Standard Webhooks signatures of callbacks (signing.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_SIGNING_H
#define JOBFLOW_SIGNING_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/array.h"

/* "webhook-id: ...", "webhook-timestamp: ..." and "webhook-signature: ..." */
#define JF_SIGNING_HEADERS 3

extern char *jf_webhook_id(const char *installation, int64 task_id);
extern char *jf_sign_v1(const uint8 *key, size_t keylen, const char *msg_id,
						int64 timestamp, const char *body, size_t body_len);
extern const char **jf_sign_headers(const char *const *headers, int *nheaders,
									ArrayType *keys, const char *installation,
									int64 task_id, const char *body,
									size_t body_len);

#endif							/* JOBFLOW_SIGNING_H */
