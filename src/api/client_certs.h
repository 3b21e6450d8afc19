/*-------------------------------------------------------------------------
 *
 * client_certs.h
 *	  Client certificates for mutual TLS, bound to origins (client_certs.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_CLIENT_CERTS_H
#define JOBFLOW_CLIENT_CERTS_H

#include "postgres.h"

/*
 * ERROR unless owner has a client certificate of that name (another
 * role's is missing too); locks it until the end of the transaction.
 */
extern void jf_lock_client_certificate(Oid owner, const char *name);

#endif							/* JOBFLOW_CLIENT_CERTS_H */
