#ifndef CGATEHOUSE_ZLIB_SHIM_H
#define CGATEHOUSE_ZLIB_SHIM_H
// zlib for Swift. deflateInit2/inflateInit2 are macros that pass the version and struct size.
#include <zlib.h>

static inline int gh_inflateInit2(z_streamp strm, int windowBits) { return inflateInit2(strm, windowBits); }
static inline int gh_deflateInit2(z_streamp strm, int level, int windowBits) {
  return deflateInit2(strm, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}
#endif
