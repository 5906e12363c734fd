import GatehouseHTTP

/// The settings a server connection announces and enforces (`limits.http2`, Docs/http2.md).
public struct HTTP2Settings: Sendable, Equatable {
  public var maxConcurrentStreams: Int
  public var initialWindowBytes: Int
  public var maxHeaderListBytes: Int

  public init(maxConcurrentStreams: Int = 128, initialWindowBytes: Int = 65_535, maxHeaderListBytes: Int = 16_384) {
    self.maxConcurrentStreams = maxConcurrentStreams
    self.initialWindowBytes = initialWindowBytes
    self.maxHeaderListBytes = maxHeaderListBytes
  }
}

/// Why a stream's request cannot be served as it came, beyond what the codec refuses itself
/// (nghttp2 resets streams whose pseudo-headers are wrong or that carry connection-specific
/// fields, RFC 9113 §8.2.2).
public enum HTTP2RequestProblem: Error, Sendable, Equatable {
  /// `Host` and `:authority` name different hosts (RFC 9113 §8.3.1): a 400.
  case hostDisagrees
  /// The request, read as HTTP/1.1 would read it, breaks one of its rules (an invalid
  /// target, a dot segment, a bad `content-length`): answered with the error's status.
  case invalid(HTTPParseError)
}

/// Abuse that ends a connection with GOAWAY (Docs/http2.md); the owner logs it, throttled.
public enum HTTP2Abuse: String, Sendable, Equatable, CaseIterable {
  /// Streams reset by the client faster than `max_concurrent_streams` per second
  /// (CVE-2023-44487).
  case rapidReset = "rapid_reset"
  /// A header block in more CONTINUATION frames than a header list can need (CVE-2024-27316).
  case continuationFlood = "continuation_flood"
  /// A header list over `max_header_list_bytes` once HPACK-decoded.
  case headerListTooLarge = "header_list_too_large"
  case settingsFlood = "settings_flood"
  case pingFlood = "ping_flood"
  case priorityFlood = "priority_flood"
  /// DATA frames with no bytes and no END_STREAM: work for nothing.
  case emptyDataFlood = "empty_data_flood"
  /// WINDOW_UPDATE frames beyond what the answers sent could call for.
  case windowUpdateFlood = "window_update_flood"
  /// Streams opened past `max_concurrent_streams`, again and again.
  case tooManyStreams = "too_many_streams"
  /// Frames the codec found invalid, again and again; or its own flood guard (control frames
  /// whose acknowledgements the client does not read).
  case invalidFrames = "invalid_frames"
  /// Answers wait and the client keeps the connection's window shut past the idle timeout.
  case windowNeverOpened = "window_never_opened"
}

/// A token bucket: `burst` tokens, refilled at `perSecond`; each event takes one. Pure: the
/// caller gives the time.
public struct TokenBucket: Sendable, Equatable {
  public let burst: Double
  public let perSecond: Double
  private var tokens: Double
  private var atNanoseconds: UInt64?

  public init(burst: Int, perSecond: Int) {
    self.burst = Double(max(1, burst))
    self.perSecond = Double(max(1, perSecond))
    tokens = self.burst
  }

  /// Takes `count` tokens at `now`; false when fewer are left (then it takes what is left,
  /// so a costly event is not allowed by waiting for a partial refill).
  public mutating func take(_ count: Int = 1, nowNanoseconds now: UInt64) -> Bool {
    if let at = atNanoseconds, now > at {
      tokens = min(burst, tokens + Double(now - at) / 1e9 * perSecond)
    }
    atNanoseconds = now
    guard tokens >= Double(count) else {
      tokens = 0
      return false
    }
    tokens -= Double(count)
    return true
  }

  /// Gives back `count` tokens, up to the burst: an allowance earned by what the other side
  /// was sent (a WINDOW_UPDATE per DATA frame).
  public mutating func refund(_ count: Int) {
    tokens = min(burst, tokens + Double(count))
  }
}
