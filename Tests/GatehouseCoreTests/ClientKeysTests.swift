import GatehouseHTTP
import Testing

@testable import GatehouseAdmin
@testable import GatehouseConfig
@testable import GatehouseCore

@Suite struct ClientKeysTests {
  static let keyHash = AdminAuthorizer.sha256Hex(Array("secret-key-1".utf8))

  func keys(required: Bool) throws -> ClientKeys {
    let config = try ConfigLoader.load(
      json: """
        {"listen":[{"address":"127.0.0.1:0"}],
         "clients":{"required":\(required),"keys":[{"id":"ios","sha256":"\(Self.keyHash)","rate_per_s":1,"burst":2}]},
         "routes":[{"name":"s","match":{"path":"/s"},"stub":{"mode":"always"}}]}
        """, environment: [:])
    return ClientKeys(config.clients)
  }

  @Test func keysAreReadFromTheHeaderOrTheApiKeyScheme() throws {
    let keys = try keys(required: true)
    #expect(keys.verdict(for: HTTPHeaders([("X-Api-Key", "secret-key-1")])) == .client(index: 0))
    #expect(keys.verdict(for: HTTPHeaders([("Authorization", "ApiKey secret-key-1")])) == .client(index: 0))
    #expect(keys.verdict(for: HTTPHeaders([("authorization", "apikey secret-key-1")])) == .client(index: 0))
    #expect(keys.verdict(for: HTTPHeaders([("X-Api-Key", "secret-key-2")])) == .invalid)
    #expect(keys.verdict(for: HTTPHeaders([("Authorization", "Bearer secret-key-1")])) == .missing)
    #expect(keys.verdict(for: HTTPHeaders()) == .missing)
  }

  @Test func withoutRequiredKeysAnonymousRequestsPass() throws {
    let keys = try keys(required: false)
    #expect(keys.verdict(for: HTTPHeaders()) == .anonymous)
    #expect(keys.verdict(for: HTTPHeaders([("X-Api-Key", "wrong")])) == .invalid)
  }

  @Test func bucketsAllowTheBurstThenRefillAtTheRate() {
    let limiter = RateLimiter(limits: [.init(perSecond: 2, burst: 3)], nowMs: 1000)
    #expect(limiter.take(bucket: 0, nowMs: 1000) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 1000) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 1000) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 1000) == .limited(retryAfterSeconds: 1))
    #expect(limiter.take(bucket: 0, nowMs: 1500) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 1500) != .allowed)
    // Never more than the burst, however long it waited.
    for _ in 0..<3 { #expect(limiter.take(bucket: 0, nowMs: 100_000) == .allowed) }
    #expect(limiter.take(bucket: 0, nowMs: 100_000) != .allowed)
  }

  @Test func slowRatesGiveLongerRetryAfter() {
    let limiter = RateLimiter(limits: [.init(perSecond: 0.1, burst: 1)], nowMs: 0)
    #expect(limiter.take(bucket: 0, nowMs: 0) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 0) == .limited(retryAfterSeconds: 10))
  }

  @Test func clockWrapDoesNotStopRefills() {
    let limiter = RateLimiter(limits: [.init(perSecond: 1, burst: 1)], nowMs: UInt32.max - 100)
    #expect(limiter.take(bucket: 0, nowMs: UInt32.max - 100) == .allowed)
    #expect(limiter.take(bucket: 0, nowMs: 1000) == .allowed)
  }

  @Test func aReplacedLimiterCarriesEachKeysLevelOver() {
    let old = RateLimiter(
      limits: [.init(perSecond: 1, burst: 3, keyID: "ios"), .init(perSecond: 1, burst: 5, keyID: "web")], nowMs: 0)
    for _ in 0..<3 { #expect(old.take(bucket: 0, nowMs: 0) == .allowed) }
    for _ in 0..<5 { #expect(old.take(bucket: 1, nowMs: 0) == .allowed) }

    // 1.5 s later: "web" now has a smaller burst and a new position, "tv" is new.
    let new = RateLimiter(
      limits: [
        .init(perSecond: 1, burst: 1, keyID: "tv"), .init(perSecond: 1, burst: 2, keyID: "web"),
        .init(perSecond: 1, burst: 3, keyID: "ios"),
      ], nowMs: 1500, previous: old)

    // "tv" starts full (its burst of 1).
    #expect(new.take(bucket: 0, nowMs: 1500) == .allowed)
    #expect(new.take(bucket: 0, nowMs: 1500) != .allowed)
    // "web" and "ios" refilled 1.5 tokens since they emptied, not a fresh burst.
    #expect(new.take(bucket: 1, nowMs: 1500) == .allowed)
    #expect(new.take(bucket: 1, nowMs: 1500) != .allowed)
    #expect(new.take(bucket: 2, nowMs: 1500) == .allowed)
    #expect(new.take(bucket: 2, nowMs: 1500) != .allowed)
  }

  @Test func aCarriedLevelIsCappedAtTheNewBurst() {
    let old = RateLimiter(limits: [.init(perSecond: 1, burst: 10, keyID: "ios")], nowMs: 0)
    let new = RateLimiter(limits: [.init(perSecond: 1, burst: 2, keyID: "ios")], nowMs: 0, previous: old)

    #expect(new.take(bucket: 0, nowMs: 0) == .allowed)
    #expect(new.take(bucket: 0, nowMs: 0) == .allowed)
    #expect(new.take(bucket: 0, nowMs: 0) != .allowed)
  }

  @Test func clientKeysNeverReachTheBackend() throws {
    var parser = HTTPRequestParser()
    let events = try parser.parseAll(
      Array("GET / HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\r\nAuthorization: ApiKey k\r\nAccept: */*\r\n\r\n".utf8))
    guard case .head(let head) = events[0] else { return }
    var out: [UInt8] = []
    UpstreamRequestWriter.write(
      head: head, target: Array("/".utf8)[...], hostHeader: Array("b".utf8),
      plan: HeaderPlan(layers: [], alsoDropped: ["X-Api-Key"], dropsAPIKeyAuthorization: true),
      clientAddress: Array("1.2.3.4".utf8), forwardedProto: "http", requestID: Array("r".utf8), framing: .none,
      into: &out)
    let text = String(decoding: out, as: UTF8.self)
    #expect(!text.contains("X-Api-Key"))
    #expect(!text.contains("ApiKey"))
    #expect(text.contains("Accept: */*"))
  }
}
