/*-------------------------------------------------------------------------
 *
 * hook.h
 *	  What the utility hook tells the launcher and the workers of a
 *	  database (hook.c): CREATE and DROP EXTENSION, CREATE DATABASE, and
 *	  holds for DROP DATABASE and the like.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LAUNCHER_HOOK_H
#define JOBFLOW_LAUNCHER_HOOK_H

#include "postgres.h"

#include "nodes/nodes.h"

extern void jf_launcher_utility_before(Node *parsetree);
extern void jf_launcher_utility_after(Node *parsetree);

#endif							/* JOBFLOW_LAUNCHER_HOOK_H */
