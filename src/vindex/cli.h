/*
 * cli.h — what the vindex commands share: parsed arguments, the handler signature, and
 * output helpers (aligned human tables with units, JSON on stdout, errors on stderr).
 * A command is one X-macro line in main.c plus one file defining it with VINDEX_HANDLER.
 */
#ifndef LQL_VINDEX_CLI_H
#define LQL_VINDEX_CLI_H

#include "vindex.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

enum { VINDEX_OK = 0, VINDEX_FAIL = 1, VINDEX_USAGE = 2 };   /* exit codes */

#define VINDEX_MAX_POS 8
#define VINDEX_MAX_FLAGS 8

/* A command line after main.c matched it against the command's table entry. */
typedef struct vindex_args {
    const char *cmd;                       /* command name */
    int json;                              /* --json: one JSON document on stdout */
    int npos;
    const char *pos[VINDEX_MAX_POS];       /* positional arguments, in order */
    int nflag;
    const char *flag[VINDEX_MAX_FLAGS];    /* flag names as in the table ("--dtype") */
    const char *val[VINDEX_MAX_FLAGS];     /* their values ("" for a switch) */
} vindex_args;

/* Defines command `name`'s handler (prototype included, for -Wmissing-prototypes).
 * The handler returns an exit code. */
#define VINDEX_HANDLER(name)                              \
    int vindex_cmd_##name(const vindex_args *a);          \
    int vindex_cmd_##name(const vindex_args *a)

/* The value of a flag given on the command line, "" for a switch, NULL when absent. */
const char *vindex_flag(const vindex_args *a, const char *name);

/* Report a failure: "vindex CMD: MSG" on stderr, or {"ok": false, "error": MSG} on stdout
 * in JSON mode. Returns VINDEX_FAIL. */
int vindex_fail(const vindex_args *a, const char *msg);
/* Same for a vx_err. */
int vindex_fail_err(const vindex_args *a, const vx_err *err);
/* Print a JSON document on stdout (and free it). Returns VINDEX_OK, or VINDEX_FAIL if it
 * could not be printed. */
int vindex_emit(cJSON *doc);
/* Open the container at a->pos[0], reporting failure; NULL on failure. */
vx_container *vindex_open(const vindex_args *a, int *rc);

/* While long work runs (encode, represent, verify), SIGINT, SIGTERM and SIGHUP raise
 * vx_cancel_flag, so the storage layer removes what it was writing and returns an error,
 * instead of the process dying with a partial file left in a container; old keeps the
 * previous actions for vindex_signals_restore. */
void vindex_signals_cancel(struct sigaction old[3]);
void vindex_signals_restore(const struct sigaction old[3]);

/* "1.5 MiB", "512 B": a byte count with a binary unit, into buf. */
const char *vindex_bytes(uint64_t n, char *buf, size_t size);
/* "[2048, 256]" */
const char *vindex_shape(const vx_tensor *t, char *buf, size_t size);

#endif
