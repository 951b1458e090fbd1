/*
 * files.h — reading whole files into memory, for scripts (.read, -f, stdin), golden test
 * files and small JSON files, and the one rule for a file a statement writes. One place, so
 * every reader caps sizes and every writer refuses the same names the same way.
 */
#ifndef LQL_FILES_H
#define LQL_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "ast.h"

/* All of f (up to max bytes; 0: no cap) as a malloc'd NUL-terminated buffer, *n its
 * length (n may be NULL). NULL on a read error, out-of-memory or a stream over the cap. */
char *lql_read_stream(FILE *f, size_t max, size_t *n);
/* The same for the file at path; NULL also when it cannot be opened. */
char *lql_read_file(const char *path, size_t max, size_t *n);

/* The rule for a new file a statement writes (TRACE … SAVE, SAVE PATCH, DIFF … INTO PATCH),
 * called before the statement does any work: path must not be empty, must not climb with a
 * ".." component (relative or absolute: "../x", "a/../../x", "/tmp/../x"), and must not
 * exist yet: lql never overwrites a file, and no statement has an OVERWRITE clause, so the
 * message tells the user to remove it; its parent must be a directory and it may not lie
 * inside a container (vx_cw_check, the container writers' rule). `what` names the clause for the message
 * ("TRACE SAVE"). 0, or -1 with e filled at `at`. The writer should still create the file
 * exclusively (O_EXCL, or fopen mode "wbx") so a file appearing in between is not clobbered
 * either. */
int lql_output_path(const char *path, const char *what, const lql_span *at, lql_err *e);

#endif
