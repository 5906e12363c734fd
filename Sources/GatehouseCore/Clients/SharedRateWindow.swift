/// A client key's limit as the shared tier counts it (Docs/shared-tier.md): fixed windows on the wall
/// clock, one counter per key and window, so that every replica counts into the same one.
///
/// The rule, for `rate_per_s` = r:
/// - r ≥ 1: windows of one second (Unix time, `floor(ms / 1000)`); the n-th request of a
///   window is allowed while n ≤ floor(r).
/// - r < 1: windows of `ceil(1 / r)` seconds (at most an hour); one request per window.
///
/// `burst` is the local buckets' (the fallback's) alone: a shared window never lets more
/// than its allowance through, and a fixed window already lets up to twice that through
/// across a boundary (the end of one window and the start of the next). A refused request's
/// `Retry-After` is the seconds left in its window, at least 1. Replicas' clocks are assumed
/// in step (NTP); one that is off counts into a neighbouring window, which the counter's
/// expiry (the window plus a second) keeps around for it.
struct SharedRateWindow: Equatable {
  /// The window's length, in seconds.
  let seconds: Int64
  /// Requests allowed per window.
  let allowance: Int64

  init(perSecond: Double) {
    if perSecond >= 1 {
      seconds = 1
      allowance = Int64(min(perSecond.rounded(.down), Double(Int32.max)))
    } else {
      seconds = Int64(min((1 / max(perSecond, 1.0 / 3600)).rounded(.up), 3600))
      allowance = 1
    }
  }

  /// The window a request at `unixMs` counts into, and the whole seconds left in it (≥ 1).
  func window(atUnixMs unixMs: Int64) -> (index: Int64, secondsLeft: Int) {
    let lengthMs = seconds * 1000
    let index = unixMs >= 0 ? unixMs / lengthMs : (unixMs - lengthMs + 1) / lengthMs
    let leftMs = (index + 1) * lengthMs - unixMs
    return (index, max(1, Int((leftMs + 999) / 1000)))
  }

  /// How long the counter is kept: its window, and a second more for a replica whose clock
  /// runs behind.
  var expiryMs: Int64 { seconds * 1000 + 1000 }

  /// Whether the request that brought the window's count to `count` goes through.
  func allows(count: Int64) -> Bool { count <= allowance }
}
