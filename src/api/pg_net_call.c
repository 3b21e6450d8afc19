/*-------------------------------------------------------------------------
 *
 * pg_net_call.c
 *	  Reading a pg_net call out of SQL text without running it.
 *
 * jobflow.import_pg_cron() turns pg_cron jobs whose command is one
 * net.http_get/http_post/http_delete call into jobflow cron timers.  The
 * command is text somebody else wrote: it is never executed.  This file
 * parses it with PostgreSQL's own grammar (raw_parser: no catalog lookup,
 * no function call) and walks the tree: exactly one SELECT whose only
 * target is one net.http_* call, each argument a literal (casts allowed),
 * jsonb_build_object() of literals, a '...'::jsonb text, or, in a header,
 * a lookup in vault.decrypted_secrets (alone or after a literal prefix),
 * which becomes a reference to a jobflow secret.  Anything else is
 * answered with a reason and nothing else.
 *
 * jobflow._pg_net_call(command) returns the call as JSON text: method,
 * url, params, headers, body (null for none), timeout_ms (pg_net's
 * defaults filled in) and secrets (what each secret reference stands
 * for); or {"reason": "..."}.  The caller casts it to jsonb: a literal
 * that is not valid JSON makes that cast fail, which the caller reports.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "base/compat.h"

PG_FUNCTION_INFO_V1(jobflow_pg_net_call);

/* A value of the command's argument expressions, as far as it is known. */
typedef enum JvKind
{
	JV_STRING,					/* s: the text */
	JV_NUMBER,					/* s: as written */
	JV_BOOL,					/* s: true or false */
	JV_NULL,
	JV_JSON,					/* s: JSON text (not yet checked) */
	JV_SECRET					/* s: the Vault name; prefix: text before it */
} JvKind;

typedef struct Jv
{
	JvKind		kind;
	char	   *s;
	char	   *prefix;
} Jv;

typedef struct Walk
{
	const char *arg;			/* the argument being read */
	int			depth;			/* of jsonb_build_object() nesting */
	char	   *reason;			/* why the command is left alone */
	StringInfoData secrets;		/* JSON array elements, comma-separated */
} Walk;

static bool eval(Node *n, Jv *out, Walk *w);

/* The last name of a qualified name list (funcname, type name), or "". */
static const char *
last_name(List *names)
{
	if (names == NIL || !IsA(llast(names), String))
		return "";
	return strVal(llast(names));
}

/* Whether a function name is one of the current time's. */
static bool
is_time_function(const char *fname)
{
	return strcmp(fname, "now") == 0 || strcmp(fname, "clock_timestamp") == 0 ||
		strcmp(fname, "statement_timestamp") == 0 ||
		strcmp(fname, "transaction_timestamp") == 0;
}

/*
 * Whether an expression reads the current time somewhere inside a
 * function call or a cast (Supabase's docs write a body as
 * concat('{"time": "', now(), '"}')::jsonb): the reason given is then
 * the time, not the function around it.
 */
static bool
reads_time(Node *n)
{
	ListCell   *lc;

	if (n == NULL)
		return false;
	if (IsA(n, SQLValueFunction))
		return true;
	if (IsA(n, TypeCast))
		return reads_time(((TypeCast *) n)->arg);
	if (IsA(n, A_Expr))
		return reads_time(((A_Expr *) n)->lexpr) || reads_time(((A_Expr *) n)->rexpr);
	if (!IsA(n, FuncCall))
		return false;
	if (is_time_function(last_name(((FuncCall *) n)->funcname)))
		return true;
	foreach(lc, ((FuncCall *) n)->args)
		if (reads_time(lfirst(lc)))
			return true;
	return false;
}

/* Set the reason once: the first one found is the one reported. */
static bool
refuse(Walk *w, char *reason)
{
	if (w->reason == NULL)
		w->reason = reason;
	return false;
}

/*
 * A lookup of one Vault secret by name, as Supabase's dashboard writes
 * it: (SELECT decrypted_secret FROM vault.decrypted_secrets WHERE name =
 * 'x').  Returns the name, or NULL when the subquery is anything else.
 */
static char *
vault_lookup(SubLink *sl)
{
	SelectStmt *s;
	ResTarget  *rt;
	ColumnRef  *col;
	RangeVar   *rv;
	A_Expr	   *eq;
	Node	   *l,
			   *r;

	if (sl->subLinkType != EXPR_SUBLINK || sl->subselect == NULL ||
		!IsA(sl->subselect, SelectStmt))
		return NULL;
	s = (SelectStmt *) sl->subselect;
	if (s->op != SETOP_NONE || s->distinctClause || s->intoClause ||
		s->groupClause || s->havingClause || s->windowClause ||
		s->valuesLists || s->sortClause || s->limitOffset ||
		s->lockingClause || s->withClause ||
		list_length(s->targetList) != 1 || list_length(s->fromClause) != 1 ||
		s->whereClause == NULL)
		return NULL;
	/* LIMIT 1 changes nothing: names are unique in Vault */
	if (s->limitCount != NULL)
	{
		A_Const    *c = (A_Const *) s->limitCount;
		Node	   *v;

		if (!IsA(c, A_Const) || (v = jf_a_const_value(c)) == NULL ||
			!IsA(v, Integer) || intVal(v) != 1)
			return NULL;
	}
	rt = linitial_node(ResTarget, s->targetList);
	if (rt->indirection || rt->val == NULL || !IsA(rt->val, ColumnRef))
		return NULL;
	col = (ColumnRef *) rt->val;
	if (!IsA(llast(col->fields), String) ||
		strcmp(strVal(llast(col->fields)), "decrypted_secret") != 0)
		return NULL;
	if (!IsA(linitial(s->fromClause), RangeVar))
		return NULL;
	rv = (RangeVar *) linitial(s->fromClause);
	if (rv->catalogname || rv->schemaname == NULL ||
		strcmp(rv->schemaname, "vault") != 0 ||
		strcmp(rv->relname, "decrypted_secrets") != 0 || rv->alias)
		return NULL;
	if (!IsA(s->whereClause, A_Expr))
		return NULL;
	eq = (A_Expr *) s->whereClause;
	if (eq->kind != AEXPR_OP || list_length(eq->name) != 1 ||
		strcmp(strVal(linitial(eq->name)), "=") != 0)
		return NULL;
	l = eq->lexpr;
	r = eq->rexpr;
	if (l && IsA(l, A_Const))
	{
		Node	   *t = l;

		l = r;
		r = t;
	}
	if (l == NULL || r == NULL || !IsA(l, ColumnRef) || !IsA(r, A_Const))
		return NULL;
	col = (ColumnRef *) l;
	if (!IsA(llast(col->fields), String) ||
		strcmp(strVal(llast(col->fields)), "name") != 0)
		return NULL;
	{
		Node	   *v = jf_a_const_value((A_Const *) r);

		if (v == NULL || !IsA(v, String))
			return NULL;
		return pstrdup(strVal(v));
	}
}

/*
 * The jobflow secret a Vault lookup becomes: the Vault name when the
 * header is the secret alone; with a prefix ('Bearer ' || ...), the
 * prefix's letters and digits in lower case, a dot, then the name, so a
 * secret holding "Bearer <token>" is never mistaken for the bare token.
 */
static char *
secret_name(const Jv *v)
{
	StringInfoData b;
	const char *p;

	if (v->prefix == NULL || v->prefix[0] == '\0')
		return pstrdup(v->s);
	initStringInfo(&b);
	for (p = v->prefix; *p; p++)
		if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))
			appendStringInfoChar(&b, *p);
		else if (*p >= 'A' && *p <= 'Z')
			appendStringInfoChar(&b, *p - 'A' + 'a');
	appendStringInfo(&b, ".%s", v->s);
	return b.data;
}

/* Append a value as JSON; a secret becomes {"secret": "name"}. */
static bool
append_json(StringInfo b, const Jv *v, const char *key, Walk *w)
{
	switch (v->kind)
	{
		case JV_STRING:
			escape_json(b, v->s);
			return true;
		case JV_NUMBER:
		case JV_BOOL:
		case JV_JSON:
			appendStringInfoString(b, v->s);
			return true;
		case JV_NULL:
			appendStringInfoString(b, "null");
			return true;
		case JV_SECRET:
			{
				char	   *name = secret_name(v);

				if (strcmp(w->arg, "headers") != 0 || w->depth != 1)
					return refuse(w, psprintf("argument %s reads Vault: only a header's value can be a secret",
											  w->arg));
				appendStringInfoString(b, "{\"secret\": ");
				escape_json(b, name);
				appendStringInfoChar(b, '}');
				if (w->secrets.len > 0)
					appendStringInfoString(&w->secrets, ", ");
				appendStringInfoString(&w->secrets, "{\"header\": ");
				escape_json(&w->secrets, key);
				appendStringInfoString(&w->secrets, ", \"secret\": ");
				escape_json(&w->secrets, name);
				appendStringInfoString(&w->secrets, ", \"vault\": ");
				escape_json(&w->secrets, v->s);
				appendStringInfoString(&w->secrets, ", \"prefix\": ");
				escape_json(&w->secrets, v->prefix ? v->prefix : "");
				appendStringInfoChar(&w->secrets, '}');
				return true;
			}
	}
	return false;
}

/* jsonb_build_object(k, v, ...) of literals: its JSON text. */
static bool
build_object(FuncCall *fc, Jv *out, Walk *w)
{
	StringInfoData b;
	ListCell   *lc;
	bool		is_key = true;
	char	   *key = NULL;

	if (list_length(fc->args) % 2 != 0)
		return refuse(w, psprintf("argument %s: jsonb_build_object() has an odd number of arguments", w->arg));
	initStringInfo(&b);
	appendStringInfoChar(&b, '{');
	w->depth++;
	foreach(lc, fc->args)
	{
		Jv			v;

		if (!eval(lfirst(lc), &v, w))
			return false;
		if (is_key)
		{
			if (v.kind != JV_STRING && v.kind != JV_NUMBER)
				return refuse(w, psprintf("argument %s: a key of jsonb_build_object() is not a literal", w->arg));
			key = v.s;
			if (b.len > 1)
				appendStringInfoString(&b, ", ");
			escape_json(&b, key);
			appendStringInfoString(&b, ": ");
		}
		else if (!append_json(&b, &v, key, w))
			return false;
		is_key = !is_key;
	}
	w->depth--;
	appendStringInfoChar(&b, '}');
	out->kind = JV_JSON;
	out->s = b.data;
	return true;
}

/* The value of an argument expression, or false with w->reason set. */
static bool
eval(Node *n, Jv *out, Walk *w)
{
	out->prefix = NULL;
	out->s = NULL;
	if (n == NULL)
		return refuse(w, psprintf("argument %s is empty", w->arg));
	switch (nodeTag(n))
	{
		case T_A_Const:
			{
				Node	   *v = jf_a_const_value((A_Const *) n);

				if (v == NULL)
					out->kind = JV_NULL;
				else if (IsA(v, Integer))
				{
					out->kind = JV_NUMBER;
					out->s = psprintf("%d", intVal(v));
				}
				else if (IsA(v, Float))
				{
					out->kind = JV_NUMBER;
					out->s = pstrdup(strVal(v));
				}
				else if (IsA(v, String))
				{
					out->kind = JV_STRING;
					out->s = pstrdup(strVal(v));
				}
				else if (jf_is_boolean_node(v))
				{
					out->kind = JV_BOOL;
					out->s = jf_boolean_node_value(v) ? "true" : "false";
				}
				else
					return refuse(w, psprintf("argument %s is not a literal the importer reads", w->arg));
				return true;
			}
		case T_TypeCast:
			{
				TypeCast   *tc = (TypeCast *) n;
				const char *type = last_name(tc->typeName->names);

				if (tc->typeName->arrayBounds != NIL)
					return refuse(w, psprintf("argument %s is cast to an array", w->arg));
				if (!eval(tc->arg, out, w))
					return false;
				if (out->kind == JV_NULL)
					return true;
				if (strcmp(type, "jsonb") == 0 || strcmp(type, "json") == 0)
				{
					if (out->kind == JV_STRING)
						out->kind = JV_JSON;
					else if (out->kind != JV_JSON)
						return refuse(w, psprintf("argument %s: only text is cast to %s", w->arg, type));
					return true;
				}
				if (strcmp(type, "text") == 0 || strcmp(type, "varchar") == 0)
				{
					if (out->kind == JV_NUMBER || out->kind == JV_BOOL)
						out->kind = JV_STRING;
					else if (out->kind != JV_STRING && out->kind != JV_SECRET)
						return refuse(w, psprintf("argument %s: JSON is cast to text", w->arg));
					return true;
				}
				if (strcmp(type, "int4") == 0 || strcmp(type, "int8") == 0 ||
					strcmp(type, "int2") == 0 || strcmp(type, "numeric") == 0 ||
					strcmp(type, "integer") == 0 || strcmp(type, "bigint") == 0)
				{
					if (out->kind == JV_STRING)
						out->kind = JV_NUMBER;
					else if (out->kind != JV_NUMBER)
						return refuse(w, psprintf("argument %s is cast to %s from a value that is not a number",
												  w->arg, type));
					return true;
				}
				if (strcmp(type, "bool") == 0 || strcmp(type, "boolean") == 0)
				{
					if (out->kind == JV_STRING &&
						(strcmp(out->s, "t") == 0 || strcmp(out->s, "true") == 0))
						out->s = "true";
					else if (out->kind == JV_STRING &&
							 (strcmp(out->s, "f") == 0 || strcmp(out->s, "false") == 0))
						out->s = "false";
					else if (out->kind != JV_BOOL)
						return refuse(w, psprintf("argument %s is cast to boolean from a value the importer does not read",
												  w->arg));
					out->kind = JV_BOOL;
					return true;
				}
				return refuse(w, psprintf("argument %s is cast to type %s, which the importer does not read",
										  w->arg, type));
			}
		case T_FuncCall:
			{
				FuncCall   *fc = (FuncCall *) n;
				const char *fname = last_name(fc->funcname);

				if (list_length(fc->funcname) > 2 ||
					(list_length(fc->funcname) == 2 &&
					 strcmp(strVal(linitial(fc->funcname)), "pg_catalog") != 0))
					return refuse(w, psprintf("argument %s calls a function of another schema", w->arg));
				if (is_time_function(fname))
					return refuse(w, psprintf("argument %s calls %s(): a jobflow timer sends the same body at every occurrence",
											  w->arg, fname));
				if (strcmp(fname, "jsonb_build_object") != 0 &&
					strcmp(fname, "json_build_object") != 0 && reads_time(n))
					return refuse(w, psprintf("argument %s calls %s() with now(): a jobflow timer sends the same body at every occurrence",
											  w->arg, fname));
				if ((strcmp(fname, "jsonb_build_object") != 0 &&
					 strcmp(fname, "json_build_object") != 0) ||
					fc->agg_order || fc->agg_filter || fc->over ||
					fc->agg_star || fc->agg_distinct || fc->func_variadic)
					return refuse(w, psprintf("argument %s calls %s(): only literals, jsonb_build_object() of literals and Vault lookups are imported",
											  w->arg, fname));
				return build_object(fc, out, w);
			}
		case T_SQLValueFunction:
			return refuse(w, psprintf("argument %s reads the current time: a jobflow timer sends the same body at every occurrence",
									  w->arg));
		case T_SubLink:
			{
				char	   *name = vault_lookup((SubLink *) n);

				if (name == NULL)
					return refuse(w, psprintf("argument %s has a subquery other than a lookup in vault.decrypted_secrets by name",
											  w->arg));
				if (strcmp(w->arg, "url") == 0)
					return refuse(w, "argument url reads Vault: a jobflow timer's URL is not a secret; write it into the timer");
				out->kind = JV_SECRET;
				out->s = name;
				out->prefix = "";
				return true;
			}
		case T_A_Expr:
			{
				A_Expr	   *e = (A_Expr *) n;
				Jv			l,
							r;

				if (e->kind != AEXPR_OP || list_length(e->name) != 1 ||
					strcmp(strVal(linitial(e->name)), "||") != 0 ||
					e->lexpr == NULL)
					return refuse(w, psprintf("argument %s is an expression, not a literal", w->arg));
				if (!eval(e->lexpr, &l, w) || !eval(e->rexpr, &r, w))
					return false;
				if (l.kind == JV_STRING && r.kind == JV_STRING)
				{
					out->kind = JV_STRING;
					out->s = psprintf("%s%s", l.s, r.s);
					return true;
				}
				if (l.kind == JV_STRING && r.kind == JV_SECRET && r.prefix[0] == '\0')
				{
					out->kind = JV_SECRET;
					out->s = r.s;
					out->prefix = l.s;
					return true;
				}
				if (l.kind == JV_SECRET || r.kind == JV_SECRET)
					return refuse(w, psprintf("argument %s puts text after a Vault secret: a jobflow secret is a whole header value, a prefix at most",
											  w->arg));
				return refuse(w, psprintf("argument %s concatenates something other than text", w->arg));
			}
		default:
			return refuse(w, psprintf("argument %s is not a literal", w->arg));
	}
}

/* pg_net's arguments of each function, in order. */
static const char *const get_args[] = {"url", "params", "headers", "timeout_milliseconds", NULL};
static const char *const post_args[] = {"url", "body", "params", "headers", "timeout_milliseconds", NULL};
static const char *const delete_args[] = {"url", "params", "headers", "timeout_milliseconds", "body", NULL};

#define NARGS 5

/* The reason for a command that is no pg_net call at all, or a broken one. */
static char *
not_a_call(const char *command, const char *what)
{
	const char *p;

	for (p = command; *p; p++)
		if (pg_strncasecmp(p, "http_", 5) == 0)
			return psprintf("not a single net.http_* call: %s", what);
	return "SQL command stays with pg_cron";
}

/* JSON text of {"reason": ...} */
static text *
reason_json(const char *reason)
{
	StringInfoData b;

	initStringInfo(&b);
	appendStringInfoString(&b, "{\"reason\": ");
	escape_json(&b, reason);
	appendStringInfoChar(&b, '}');
	return cstring_to_text(b.data);
}

/*
 * jobflow._pg_net_call(command text) RETURNS text: the pg_net call the
 * command is, as JSON, or why it is not one.  Parses; never executes.
 */
Datum
jobflow_pg_net_call(PG_FUNCTION_ARGS)
{
	char	   *command = text_to_cstring(PG_GETARG_TEXT_PP(0));
	List	   *stmts;
	RawStmt    *raw;
	SelectStmt *s;
	ResTarget  *rt;
	FuncCall   *fc;
	const char *fname;
	const char *method;
	const char *const *names;
	Jv			vals[NARGS];
	bool		given[NARGS] = {false};
	int			nargs = 0;
	int			i;
	ListCell   *lc;
	Walk		w = {0};
	StringInfoData b;
	long		timeout = 5000;

	initStringInfo(&w.secrets);
	stmts = raw_parser(command, RAW_PARSE_DEFAULT);
	if (list_length(stmts) != 1)
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "more than one statement")));
	raw = linitial_node(RawStmt, stmts);
	if (!IsA(raw->stmt, SelectStmt))
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "not a SELECT")));
	s = (SelectStmt *) raw->stmt;
	if (s->op != SETOP_NONE || s->distinctClause || s->intoClause ||
		s->fromClause || s->whereClause || s->groupClause || s->havingClause ||
		s->windowClause || s->valuesLists || s->sortClause || s->limitOffset ||
		s->limitCount || s->lockingClause || s->withClause ||
		list_length(s->targetList) != 1)
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "the SELECT has more than one call")));
	rt = linitial_node(ResTarget, s->targetList);
	if (rt->indirection || rt->val == NULL || !IsA(rt->val, FuncCall))
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "the SELECT's target is not a function call")));
	fc = (FuncCall *) rt->val;
	fname = last_name(fc->funcname);
	if (list_length(fc->funcname) > 2 ||
		(list_length(fc->funcname) == 2 && strcmp(strVal(linitial(fc->funcname)), "net") != 0))
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "the function is not in schema net")));
	if (strcmp(fname, "http_get") == 0)
		method = "GET", names = get_args;
	else if (strcmp(fname, "http_post") == 0)
		method = "POST", names = post_args;
	else if (strcmp(fname, "http_delete") == 0)
		method = "DELETE", names = delete_args;
	else
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, psprintf("%s() is not net.http_get, net.http_post or net.http_delete", fname))));
	if (fc->agg_order || fc->agg_filter || fc->over || fc->agg_star ||
		fc->agg_distinct || fc->func_variadic)
		PG_RETURN_TEXT_P(reason_json(not_a_call(command, "the call has an aggregate's or a window's clauses")));

	while (names[nargs] != NULL)
		nargs++;
	i = 0;
	foreach(lc, fc->args)
	{
		Node	   *a = lfirst(lc);
		int			k;

		if (IsA(a, NamedArgExpr))
		{
			NamedArgExpr *na = (NamedArgExpr *) a;

			for (k = 0; k < nargs; k++)
				if (strcmp(names[k], na->name) == 0)
					break;
			if (k == nargs)
				PG_RETURN_TEXT_P(reason_json(psprintf("net.%s has no argument %s", fname, na->name)));
			a = (Node *) na->arg;
		}
		else
		{
			k = i;
			if (k >= nargs)
				PG_RETURN_TEXT_P(reason_json(psprintf("net.%s has at most %d arguments", fname, nargs)));
		}
		if (given[k])
			PG_RETURN_TEXT_P(reason_json(psprintf("argument %s is given twice", names[k])));
		w.arg = names[k];
		w.depth = 0;
		if (!eval(a, &vals[k], &w))
			PG_RETURN_TEXT_P(reason_json(w.reason));
		given[k] = true;
		i++;
	}

	initStringInfo(&b);
	appendStringInfo(&b, "{\"method\": \"%s\"", method);
	for (i = 0; i < nargs; i++)
	{
		const char *name = names[i];
		Jv		   *v = &vals[i];

		if (strcmp(name, "url") == 0)
		{
			if (!given[i])
				PG_RETURN_TEXT_P(reason_json("argument url is missing"));
			if (v->kind == JV_SECRET)
				PG_RETURN_TEXT_P(reason_json("argument url reads Vault: a jobflow timer's URL is not a secret; write it into the timer"));
			if (v->kind != JV_STRING)
				PG_RETURN_TEXT_P(reason_json("argument url is not a text literal"));
			appendStringInfoString(&b, ", \"url\": ");
			escape_json(&b, v->s);
		}
		else if (strcmp(name, "timeout_milliseconds") == 0)
		{
			if (given[i])
			{
				char	   *end;

				if (v->kind != JV_NUMBER)
					PG_RETURN_TEXT_P(reason_json("argument timeout_milliseconds is not a number"));
				errno = 0;
				timeout = strtol(v->s, &end, 10);
				if (errno != 0 || *end != '\0' || timeout <= 0 || timeout > PG_INT32_MAX)
					PG_RETURN_TEXT_P(reason_json("argument timeout_milliseconds is not a positive integer"));
			}
			appendStringInfo(&b, ", \"timeout_ms\": %ld", timeout);
		}
		else
		{
			const char *deflt;

			/* pg_net's defaults */
			if (strcmp(name, "body") == 0)
				deflt = strcmp(method, "POST") == 0 ? "{}" : "null";
			else if (strcmp(name, "headers") == 0)
				deflt = strcmp(method, "POST") == 0 ? "{\"Content-Type\": \"application/json\"}" : "{}";
			else
				deflt = "{}";
			appendStringInfo(&b, ", \"%s\": ", name);
			if (!given[i])
				appendStringInfoString(&b, deflt);
			else if (v->kind == JV_STRING || v->kind == JV_JSON)
				appendStringInfoString(&b, v->s);	/* text given for jsonb */
			else if (v->kind == JV_NULL && strcmp(name, "body") == 0)
				appendStringInfoString(&b, "null");
			else
				PG_RETURN_TEXT_P(reason_json(psprintf("argument %s is not JSON", name)));
		}
	}
	appendStringInfo(&b, ", \"secrets\": [%s]}", w.secrets.data);
	PG_RETURN_TEXT_P(cstring_to_text(b.data));
}
