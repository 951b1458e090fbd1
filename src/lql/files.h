/*
 * files.h — reading whole files into memory, for scripts (.read, -f, stdin), golden test
 * files and small JSON files. One place, so every reader caps sizes and fails the same way.
 */
#ifndef LQL_FILES_H
#define LQL_FILES_H

#include <stddef.h>
#include <stdio.h>

/* All of f (up to max bytes; 0: no cap) as a malloc'd NUL-terminated buffer, *n its
 * length (n may be NULL). NULL on a read error, out-of-memory or a stream over the cap. */
char *lql_read_stream(FILE *f, size_t max, size_t *n);
/* The same for the file at path; NULL also when it cannot be opened. */
char *lql_read_file(const char *path, size_t max, size_t *n);

#endif
