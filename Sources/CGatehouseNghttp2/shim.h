#ifndef CGATEHOUSE_NGHTTP2_SHIM_H
#define CGATEHOUSE_NGHTTP2_SHIM_H
// libnghttp2 for Swift: the frame codec and stream state machine of HTTP/2 connections.
// nghttp2_frame is a C union and the data provider's source one too; these accessors keep
// the Swift side free of union layout.
#include <nghttp2/nghttp2.h>
#include <stdint.h>

static inline uint8_t gh_h2_frame_type(const nghttp2_frame *frame) { return frame->hd.type; }
static inline uint8_t gh_h2_frame_flags(const nghttp2_frame *frame) { return frame->hd.flags; }
static inline int32_t gh_h2_frame_stream(const nghttp2_frame *frame) { return frame->hd.stream_id; }
static inline size_t gh_h2_frame_length(const nghttp2_frame *frame) { return frame->hd.length; }
static inline int gh_h2_headers_category(const nghttp2_frame *frame) { return (int)frame->headers.cat; }
static inline uint32_t gh_h2_rst_error_code(const nghttp2_frame *frame) { return frame->rst_stream.error_code; }

/// Submits a response whose body is produced by `read` (NULL: no body).
static inline int gh_h2_submit_response(
  nghttp2_session *session, int32_t stream_id, const nghttp2_nv *nva, size_t nvlen,
  nghttp2_data_source_read_callback read
) {
  if (read == NULL) return nghttp2_submit_response(session, stream_id, nva, nvlen, NULL);
  nghttp2_data_provider provider;
  provider.source.ptr = NULL;
  provider.read_callback = read;
  return nghttp2_submit_response(session, stream_id, nva, nvlen, &provider);
}

/// Submits a request (tests drive the server side with a client session).
static inline int32_t gh_h2_submit_request(
  nghttp2_session *session, const nghttp2_nv *nva, size_t nvlen, nghttp2_data_source_read_callback read
) {
  if (read == NULL) return nghttp2_submit_request(session, NULL, nva, nvlen, NULL, NULL);
  nghttp2_data_provider provider;
  provider.source.ptr = NULL;
  provider.read_callback = read;
  return nghttp2_submit_request(session, NULL, nva, nvlen, &provider, NULL);
}
#endif
