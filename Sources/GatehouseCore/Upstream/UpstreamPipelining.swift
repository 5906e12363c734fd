import GatehouseHTTP

/// Upstream pipelining, as pure decisions: which requests may be written on a connection
/// behind another one, which connection they join, and what happens to the waiting ones
/// when the answer in front of them ends.
///
/// Why: on a busy loop several bodiless GETs for the same upstream are usually parsed in
/// one turn. Written together on one keep-alive connection they cost the gateway one send
/// (and the upstream one receive) instead of one each, and on a fast upstream the sends
/// are most of a proxied request's cost. The price is head-of-line waiting: an upstream
/// answers one connection's requests in order, so a request waits for those before it.
/// That is why only upstreams that have been answering within `fastAnswerNanoseconds`
/// take part, a batch only gathers requests parsed in the same loop turn, and
/// `pipeline_depth` bounds it (0 turns pipelining off).
public enum PipelinePolicy {
  /// The smoothed answer time under which an upstream counts as fast. Past it the
  /// waiting would cost more than the sends it saves.
  public static let fastAnswerNanoseconds: UInt64 = 2_000_000

  /// How long a request waits behind other answers on its connection before it goes
  /// alone on another: 25 times the answer time under which pipelining is used at all,
  /// so only an answer far slower than usual makes requests behind it leave (the upstream
  /// then sees them twice, which is harmless for the safe methods that are pipelined).
  public static let queuePatienceNanoseconds: UInt64 = 50_000_000

  /// Only GETs are written behind another, and only on their first sending (a resend
  /// follows a failure or a token rejection and goes alone). If the connection ends before
  /// their answer they are sent again, and nothing is lost by the upstream having seen
  /// them; without a body nothing else must follow the head on the wire. Not HEAD: its
  /// answer's end is implied, so a body the upstream sends anyway (a common bug) would be
  /// read as the next request's answer, and every answer after it would go to the wrong
  /// client.
  public static func mayJoin(method: HTTPMethod, hasBody: Bool, isResend: Bool) -> Bool {
    method == .get && !hasBody && !isResend
  }
}

/// The requests on one upstream connection that wait behind the one being answered
/// (HTTP/1.1 answers come back in request order). `Owner` is whoever reads an answer.
public struct PipelineQueue<Owner> {
  public private(set) var waiting: [Owner] = []
  /// A waiting request gave up: the answers after the current one no longer line up with
  /// their requests, so the connection ends after it and the rest are sent elsewhere.
  public private(set) var spoiled = false

  public enum HeadFinished {
    /// The next request's answer is next on the wire: it becomes the connection's owner.
    case promote(Owner)
    /// Nothing waits: the connection goes back to the pool (if it is reusable).
    case release
    /// The connection ends; these requests were not answered and go elsewhere.
    case close(dropped: [Owner])
  }

  public init() {}

  public var isEmpty: Bool { waiting.isEmpty }

  public mutating func append(_ owner: Owner) {
    waiting.append(owner)
  }

  /// The answer being read is complete; `reusable` says whether the connection may carry
  /// another (keep-alive, nothing unexpected, pool not retired).
  public mutating func headFinished(reusable: Bool) -> HeadFinished {
    if waiting.isEmpty {
      return reusable && !spoiled ? .release : .close(dropped: [])
    }
    guard reusable, !spoiled else { return .close(dropped: dropAll()) }
    return .promote(waiting.removeFirst())
  }

  /// A waiting request gave up (its client left, or it timed out). Returns false when it
  /// was not waiting here.
  public mutating func abandon(where matches: (Owner) -> Bool) -> Bool {
    guard let index = waiting.firstIndex(where: matches) else { return false }
    waiting.remove(at: index)
    spoiled = true
    return true
  }

  /// The connection failed or was given up by the request being answered.
  public mutating func dropAll() -> [Owner] {
    defer { waiting.removeAll() }
    return waiting
  }
}

/// One pool's batch: the connection that requests parsed in the current loop turn join.
/// `turn` identifies a loop turn (its iteration time).
public struct PipelineBatch<ConnectionID: Equatable> {
  public let maxDepth: Int
  public private(set) var connection: ConnectionID?
  private var turn: UInt64 = 0
  private var depth = 0

  public init(maxDepth: Int) {
    self.maxDepth = max(0, maxDepth)
  }

  /// The connection a request in `turn` may join (and counts it), or nil: lease one.
  public mutating func join(turn: UInt64) -> ConnectionID? {
    guard let connection, self.turn == turn, depth < maxDepth else { return nil }
    depth += 1
    return connection
  }

  /// True when the batch just reached its depth: its requests should leave now rather
  /// than at the end of the turn.
  public var isFull: Bool { connection != nil && depth >= maxDepth }

  /// A request in `turn` leased `id` (reused, proven keep-alive): later ones may join it.
  public mutating func start(_ id: ConnectionID, turn: UInt64) {
    guard maxDepth > 1 else { return }
    connection = id
    self.turn = turn
    depth = 1
  }

  /// `id` takes no more requests (its batch was sent full, it closed or it went idle).
  public mutating func end(_ id: ConnectionID) {
    if connection == id { connection = nil }
  }
}

/// A smoothed answer time (exponential, weight 1/8 for a new sample, as TCP smooths its
/// round-trip time), in nanoseconds. Unknown until the first sample.
public struct AnswerTimeAverage {
  public private(set) var nanoseconds: UInt64?

  public init() {}

  public mutating func record(_ sample: UInt64) {
    guard let current = nanoseconds else {
      nanoseconds = sample
      return
    }
    nanoseconds = sample >= current ? current + (sample - current) / 8 : current - (current - sample) / 8
  }

  public var isFast: Bool {
    guard let nanoseconds else { return false }
    return nanoseconds <= PipelinePolicy.fastAnswerNanoseconds
  }
}
