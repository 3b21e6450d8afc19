/*-------------------------------------------------------------------------
 *
 * secrets.c
 *	  Named secrets that header values refer to ({"secret": "name"}), and
 *	  the origins each may be sent to.
 *
 * set_secret() and drop_secret() write jobflow.secrets as the table's
 * owner after checking the caller (no tenant, not even the secret's own
 * role, nor jobflow_admin, may read the table); the row trigger checks
 * that a task's references exist and may go to the task's origin (and
 * locks them, so a concurrent drop_secret() waits and then sees the task);
 * the worker substitutes the values when it builds the request, for the
 * secrets whose origins include the request's (dispatch.c).
 *
 * A secret is bound to origins given with its value.  Whoever could point
 * a task that uses a secret at a receiver of its own (the owner, or
 * jobflow_admin through _replace_task or an UPDATE of a timer) would read
 * the value otherwise; changing the origins takes the value again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "api/secrets.h"
#include "api/as_owner.h"
#include "api/tenant_api.h"
#include "api/url_check.h"
#include "core/fair.h"

#define SECRET_NAME_MAX 63
#define SECRET_VALUE_MAX 8192
#define SECRET_ORIGINS_MAX 64

/* Names: 1 to 63 letters, digits, '_', '-' or '.'; echoed in errors. */
static void
check_secret_name(const char *name)
{
	int			len = strlen(name);
	int			i;

	if (len == 0 || len > SECRET_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("secret name must have 1 to %d characters", SECRET_NAME_MAX)));
	for (i = 0; i < len; i++)
		if (!isalnum((unsigned char) name[i]) && strchr("_-.", name[i]) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid character in secret name at position %d", i + 1),
					 errdetail("Secret names may contain letters, digits, \"_\", \"-\" and \".\" only.")));
}

/* qsort order of text Datums holding origins (plain ASCII) */
static int
compare_origins(const void *a, const void *b)
{
	return strcmp(TextDatumGetCString(*(const Datum *) a),
				  TextDatumGetCString(*(const Datum *) b));
}

/*
 * The origins a secret may be sent to, normalised as the worker keys
 * origins ("scheme://host:port", lower case): each must be an http(s) URL
 * with a host and no path beyond "/", no query, fragment or credentials.
 * A TEXTOID array, sorted and without duplicates.  Client certificates
 * are bound to origins the same way (client_certs.c), to https ones only:
 * what names what the origins are for, in messages.
 */
ArrayType *
jf_secret_origins(ArrayType *given, const char *what, bool https_only)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Datum	   *out;
	int			nout = 0;
	int			i;

	if (ARR_NDIM(given) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("origins must be a one-dimensional array")));
	deconstruct_array(given, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0 || n > SECRET_ORIGINS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a %s needs 1 to %d origins it may be sent to", what, SECRET_ORIGINS_MAX),
				 errhint("Give them as origins => ARRAY['https://api.example.com'].")));
	out = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		char	   *o;
		char		key[JF_FAIR_ORIGIN_MAX];
		const char *rest;
		int			k;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("origins must not contain null")));
		o = TextDatumGetCString(elems[i]);
		/* the URL rules of tasks: scheme, host, port, no credentials */
		jf_check_url(o);
		rest = strstr(o, "://") + 3;
		rest += strcspn(rest, "/?#");
		if (!(*rest == '\0' || strcmp(rest, "/") == 0) || strchr(o, '@') != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("origin %d is not of the form scheme://host[:port]", i + 1),
					 errdetail("A %s is bound to whole origins: no path, query, fragment or credentials.", what)));
		if (https_only && pg_strncasecmp(o, "https://", 8) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("origin %d is not https", i + 1),
					 errdetail("A %s is presented in a TLS handshake only.", what)));
		if (!jf_fair_origin(o, key, sizeof(key)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("origin %d is not of the form scheme://host[:port]", i + 1)));
		for (k = 0; k < nout; k++)
			if (strcmp(TextDatumGetCString(out[k]), key) == 0)
				break;
		if (k == nout)
			out[nout++] = CStringGetTextDatum(key);
	}
	qsort(out, nout, sizeof(Datum), compare_origins);
	return construct_array(out, nout, TEXTOID, -1, false, TYPALIGN_INT);
}

/*
 * Store or replace the secret name of role: checked as a header value is
 * (no message ever contains it), with its origins, or without any for a
 * schema of 0.2.0 that has no such column.
 */
static void
store_secret(Oid role, FunctionCallInfo fcinfo, ArrayType *origins)
{
	char	   *name;
	text	   *value;
	const char *v;
	int			len;
	int			i;
	Oid			types[4] = {OIDOID, TEXTOID, TEXTOID, TEXTARRAYOID};
	Datum		values[4];
	JfAsOwner	as_owner;

	jf_check_owner_role(role);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("secret name and value must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_secret_name(name);
	value = PG_GETARG_TEXT_PP(1);
	v = VARDATA_ANY(value);
	len = VARSIZE_ANY_EXHDR(value);
	if (len == 0 || len > SECRET_VALUE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("secret value must have 1 to %d bytes", SECRET_VALUE_MAX)));
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) v[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("secret value contains a control character"),
					 errdetail("It is sent as a header value, where carriage returns, line feeds and other control characters could inject headers.")));
	}

	values[0] = ObjectIdGetDatum(role);
	values[1] = CStringGetTextDatum(name);
	values[2] = PointerGetDatum(value);
	values[3] = PointerGetDatum(origins);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("secrets", &as_owner);
	if (SPI_execute_with_args(origins != NULL ?
							  "INSERT INTO jobflow.secrets (owner, name, value, origins)"
							  " VALUES ($1, $2, $3, $4)"
							  " ON CONFLICT (owner, name) DO UPDATE"
							  " SET value = excluded.value, origins = excluded.origins,"
							  "     updated_at = pg_catalog.clock_timestamp()" :
							  "INSERT INTO jobflow.secrets (owner, name, value)"
							  " VALUES ($1, $2, $3)"
							  " ON CONFLICT (owner, name) DO UPDATE"
							  " SET value = excluded.value, updated_at = pg_catalog.clock_timestamp()",
							  origins != NULL ? 4 : 3, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not store the secret");
	jf_as_owner_end(&as_owner);
	SPI_finish();
}

/*
 * jobflow.set_secret(name text, value text, origins text[], for_role
 * regrole) RETURNS void: stores or replaces a secret that headers may
 * refer to, with the origins it may be sent to.  The origins come with the
 * value, always: whoever may change where a secret goes must know it
 * already, so pointing a task at a receiver of one's own never reads a
 * secret back.
 */
PG_FUNCTION_INFO_V1(jobflow_set_secret_origins);
Datum
jobflow_set_secret_origins(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 3, "manage the secrets of");

	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a secret needs the origins it may be sent to"),
				 errdetail("A secret is sent only to the origins given with its value, so that no task pointed elsewhere can read it back."),
				 errhint("Give them as jobflow.set_secret(name, $1, origins => ARRAY['https://api.example.com']).")));
	store_secret(role, fcinfo, jf_secret_origins(PG_GETARG_ARRAYTYPE_P(2), "secret", false));
	PG_RETURN_VOID();
}

/*
 * jobflow.set_secret(name, value, for_role) as 0.2.0 declared it: only a
 * database whose schema was not updated yet calls it.  Its secrets get
 * their origins from the update (jobflow--0.2.0--0.3.0.sql).
 */
PG_FUNCTION_INFO_V1(jobflow_set_secret);
Datum
jobflow_set_secret(PG_FUNCTION_ARGS)
{
	store_secret(jf_managed_role(fcinfo, 2, "manage the secrets of"), fcinfo, NULL);
	PG_RETURN_VOID();
}

/*
 * jobflow._origin(url text) RETURNS text: the origin of a URL as the
 * worker keys it ("scheme://host:port", lower case), NULL when it has
 * none; what secrets' origins are compared with.
 */
PG_FUNCTION_INFO_V1(jobflow_origin);
Datum
jobflow_origin(PG_FUNCTION_ARGS)
{
	char		key[JF_FAIR_ORIGIN_MAX];

	if (!jf_fair_origin(text_to_cstring(PG_GETARG_TEXT_PP(0)), key, sizeof(key)))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(key));
}

/*
 * jobflow.drop_secret(name text, for_role regrole) RETURNS boolean: true
 * when the secret existed.  Refused while unfinished tasks or cron timers
 * of the role refer to it: their callbacks would go out without it.  The
 * delete comes first: it waits for transactions that are scheduling a
 * task with the secret (the row trigger locks it), and the check after it
 * then sees their tasks.
 */
PG_FUNCTION_INFO_V1(jobflow_drop_secret);
Datum
jobflow_drop_secret(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 1, "manage the secrets of");
	char	   *name;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	JfAsOwner	as_owner;
	bool		found;
	int64		tasks;
	int64		timers;
	bool		isnull;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	values[0] = ObjectIdGetDatum(role);
	values[1] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("secrets", &as_owner);
	if (SPI_execute_with_args("DELETE FROM jobflow.secrets"
							  " WHERE owner OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not drop the secret");
	found = SPI_processed > 0;
	if (found)
	{
		if (SPI_execute_with_args("SELECT"
								  " (SELECT pg_catalog.count(*) FROM jobflow.tasks t"
								  "   WHERE t.owner OPERATOR(pg_catalog.=) $1"
								  "     AND t.state OPERATOR(pg_catalog.=) ANY ('{pending,running}')"
								  "     AND EXISTS (SELECT 1 FROM pg_catalog.jsonb_each(t.headers) h"
								  "                  WHERE h.value OPERATOR(pg_catalog.->>) 'secret' OPERATOR(pg_catalog.=) $2)),"
								  " (SELECT pg_catalog.count(*) FROM jobflow.cron_timers c"
								  "   WHERE c.owner OPERATOR(pg_catalog.=) $1"
								  "     AND EXISTS (SELECT 1 FROM pg_catalog.jsonb_each(c.headers) h"
								  "                  WHERE h.value OPERATOR(pg_catalog.->>) 'secret' OPERATOR(pg_catalog.=) $2))",
								  2, types, values, NULL, false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not look for uses of the secret");
		tasks = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		timers = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		if (tasks > 0 || timers > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("secret \"%s\" is in use", name),
					 errdetail("%lld unfinished task(s) and %lld cron timer(s) refer to it.",
							   (long long) tasks, (long long) timers),
					 errhint("Cancel those tasks and change those timers first, or give the secret a new value with jobflow.set_secret().")));
	}
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/*
 * The row trigger's check of a task's (or timer's) secret references: each
 * must name a secret of the owner that may be sent to the origin of url.
 * The secret rows are locked (KEY SHARE) until the end of the transaction,
 * so drop_secret() waits for it.  Neither the URL nor the origin goes into
 * a message: a URL may carry secrets of its own.
 */
void
jf_check_secret_refs(List *names, Oid owner, const char *url)
{
	Oid			types[3] = {OIDOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		origin[JF_FAIR_ORIGIN_MAX];
	JfAsOwner	as_owner;
	ListCell   *lc;
	bool		isnull;
	Oid			relid = get_relname_relid("secrets", get_namespace_oid("jobflow", false));

	bool		bound;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("header secrets need jobflow 0.2.0"),
				 errhint("Run ALTER EXTENSION jobflow UPDATE.")));
	/* 0.2.0's schema, until it is updated: secrets have no origins yet */
	bound = get_attnum(relid, "origins") != InvalidAttrNumber;
	if (!jf_fair_origin(url, origin, sizeof(origin)))
		elog(ERROR, "a checked URL has no origin");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("secrets", &as_owner);
	values[0] = ObjectIdGetDatum(owner);
	values[2] = CStringGetTextDatum(origin);
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);

		values[1] = CStringGetTextDatum(name);
		if (SPI_execute_with_args(bound ?
								  "SELECT $3 OPERATOR(pg_catalog.=) ANY (s.origins)"
								  "  FROM jobflow.secrets s"
								  " WHERE s.owner OPERATOR(pg_catalog.=) $1"
								  "   AND s.name OPERATOR(pg_catalog.=) $2 FOR KEY SHARE" :
								  "SELECT true"
								  "  FROM jobflow.secrets s"
								  " WHERE s.owner OPERATOR(pg_catalog.=) $1"
								  "   AND s.name OPERATOR(pg_catalog.=) $2 FOR KEY SHARE",
								  3, types, values, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look up a secret");
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("secret \"%s\" does not exist", name),
					 errhint("Store it first with jobflow.set_secret('%s', ...), as the role the task belongs to.",
							 name)));
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("secret \"%s\" may not be sent to the origin of this URL", name),
					 errdetail("A secret is sent only to the origins given with its value."),
					 errhint("Call the secret's origin, or set the secret again with this origin among its origins.")));
	}
	jf_as_owner_end(&as_owner);
	SPI_finish();
}
