/* linattn_last_error: one message per thread, overwritten by every call. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "call.h"

static _Thread_local char message[320] = "success";

linattn_status la_fail(linattn_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return st;
}

void la_succeed(void) { strcpy(message, "success"); }

const char *linattn_last_error(void) { return message; }
