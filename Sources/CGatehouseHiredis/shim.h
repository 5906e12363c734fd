#ifndef CGATEHOUSE_HIREDIS_SHIM_H
#define CGATEHOUSE_HIREDIS_SHIM_H
// hiredis 0.14 for Swift: only its RESP reader (and, for tests, its command formatter) are
// used; the bytes travel over GatehouseNet's own connections. These accessors keep the Swift
// side free of the reader's layout (a fixed-size char array and the buffer cursor).
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stddef.h>

/// Bytes fed to the reader and not yet consumed by a complete reply.
static inline size_t gh_redis_reader_unread(const redisReader *reader) { return reader->len - reader->pos; }
/// The reader's error text (valid after redisReaderGetReply returned REDIS_ERR).
static inline const char *gh_redis_reader_error(const redisReader *reader) { return reader->errstr; }
/// How much unused buffer the reader keeps between replies before it frees it.
static inline void gh_redis_reader_set_max_buffer(redisReader *reader, size_t bytes) { reader->maxbuf = bytes; }
/// The element at `index` of an array reply (the importer sees `element` as a double pointer).
static inline const redisReply *gh_redis_reply_element(const redisReply *reply, size_t index) {
  return reply->element[index];
}
#endif
