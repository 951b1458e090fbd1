/*
 * err.c — the storage layer's error values. Every fallible function fills a caller-owned
 * vx_err with a code and a one-line message and returns -1; nothing here prints.
 */
#include "vindex.h"

#include <stdarg.h>
#include <stdio.h>

/* Formats into err->msg (truncating at VX_ERR_MAX) when err is not NULL; always -1. */
int vx_errf(vx_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* Raised by the shell on Ctrl-C; long-running storage work polls it. */
_Atomic int vx_cancel_flag;
