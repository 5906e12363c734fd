/// Tells an upstream going away (a shutdown or restart closes every kept connection within
/// moments) from keep-alive timeouts (one connection now and then). Pure: the clock is
/// passed in.
public struct ConnectionDropDetector: Sendable, Equatable {
  /// Closes this close together count as one event.
  public static let windowNanoseconds: UInt64 = 100_000_000
  /// At least this many in one window: a lone keep-alive timeout is no signal.
  public static let minimumDrops = 2

  private var windowStart: UInt64 = 0
  private var drops = 0

  public init() {}

  /// An idle connection was closed by the upstream at `now`, leaving `idleLeft` idle ones.
  /// Returns true when the upstream has just dropped all of them at once.
  public mutating func idleConnectionDropped(now: UInt64, idleLeft: Int) -> Bool {
    if drops == 0 || now &- windowStart > Self.windowNanoseconds {
      windowStart = now
      drops = 0
    }
    drops += 1
    return idleLeft == 0 && drops >= Self.minimumDrops
  }
}
