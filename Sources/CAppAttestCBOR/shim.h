#ifndef C_APP_ATTEST_CBOR_SHIM_H
#define C_APP_ATTEST_CBOR_SHIM_H
// libcbor 0.8 (Debian's libcbor-dev). Only the streaming decoder is used: `cbor_load` trusts declared
// lengths and would allocate for them (CONTRIBUTING.md, “OpenSSL and libcbor”), while `cbor_stream_decode` decodes one
// item header at a
// time and never allocates.
#include <cbor.h>
#endif
