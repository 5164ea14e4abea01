#ifndef C_APP_ATTEST_ALLOCATOR_SHIM_H
#define C_APP_ATTEST_ALLOCATOR_SHIM_H

#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/// Sets glibc's M_TRIM_THRESHOLD: free memory at the top of a heap is returned to the system only beyond this many
/// bytes. Returns 1 when set, 0 when the C library is not glibc or refused the value.
static inline int appattest_set_trim_threshold(int bytes) {
#if defined(__GLIBC__)
    return mallopt(M_TRIM_THRESHOLD, bytes);
#else
    (void)bytes;
    return 0;
#endif
}

#endif
