import Dispatch
import GatehouseHTTP
import GatehouseNet
import Synchronization
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// The OAuth 2 client credentials fetcher and its HTTP client, against an in-process token endpoint on
/// loopback, plus the encodings it relies on.
@Suite(.serialized) struct OAuth2FetcherTests {
  /// Runs one fetch on a fresh loop and waits for its result.
  func fetch(
    _ config: OAuth2ClientCredentialsConfig,
    limits: HTTPOneShotClient.Limits = HTTPOneShotClient.Limits(
      connectTimeout: .seconds(5), answerTimeout: .seconds(5), maxAnswerBytes: 64 * 1024)
  ) throws -> Result<FetchedToken, TokenFetchError> {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.loops[0]
    let fetcher = OAuth2ClientCredentialsFetcher(limits: limits)
    let outcome = UncheckedBox<Result<FetchedToken, TokenFetchError>?>(nil)
    let calls = UncheckedBox(0)
    try runOnLoop(loop) {
      fetcher.fetch(config, on: loop) { result in
        calls.value += 1
        outcome.value = result
      }
    }
    try #require(waitFor { (try? runOnLoop(loop) { outcome.value != nil }) ?? false })
    // One more loop turn: a second (wrong) completion would show up here.
    try runOnLoop(loop) {}
    #expect(try runOnLoop(loop) { calls.value } == 1)
    return try runOnLoop(loop) { outcome.value! }
  }

  func failureMessage(_ result: Result<FetchedToken, TokenFetchError>) -> String? {
    if case .failure(let error) = result { return error.message }
    return nil
  }

  @Test func sendsAFormPostWithBasicClientAuthAndReadsTheToken() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .issue(expiresIn: 120)
    let config = try oauth2Config(port: server.port, clientID: "gw:app/1", secret: "s3cr&t +%", scope: "read write")
    let result = try fetch(config)
    let token = try result.get()
    #expect(token.accessToken == SecretValue("tok-1"))
    #expect(token.expiresIn == .seconds(120))
    #expect(token.tokenType == "Bearer")

    let request = try #require(server.requests.first)
    #expect(request.method == "POST")
    #expect(request.target == "/oauth/token")
    #expect(request.header("Content-Type") == "application/x-www-form-urlencoded")
    #expect(request.header("Host") == "127.0.0.1:\(server.port)")
    #expect(request.body == "grant_type=client_credentials&scope=read+write")
    // RFC 6749 §2.3.1: id and secret are form-encoded before they are joined and base64-encoded.
    let expected = Base64.encode(Array("gw%3Aapp%2F1:s3cr%26t+%2B%25".utf8))
    #expect(request.header("Authorization") == "Basic \(expected)")
  }

  @Test func leavesScopeOutWhenNotSetAndAcceptsMissingExpiry() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .issue(expiresIn: nil)
    let token = try fetch(try oauth2Config(port: server.port, scope: nil)).get()
    #expect(token.expiresIn == nil)
    #expect(server.requests.first?.body == "grant_type=client_credentials")
  }

  @Test func invalidClientBecomesAReadableErrorWithoutTheSecret() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    let secret = "CANARY-client-secret-42"
    // A careless endpoint that echoes the credentials it was given.
    server.mode = .answer(
      status: 400, body: #"{"error":"invalid_client","error_description":"bad secret \#(secret)"}"#)
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port, secret: secret))))
    #expect(message.contains("answered 400: invalid_client (bad secret <redacted>)"))
    #expect(message.hasPrefix("token endpoint http://127.0.0.1:\(server.port)/oauth/token: "))
    #expect(!message.contains(secret))
  }

  @Test func aTokenThatIsNotBearerIsAFailedFetch() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .answer(status: 200, body: #"{"access_token":"CANARY-mac-token","token_type":"mac"}"#)
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port))))
    #expect(message == "token endpoint http://127.0.0.1:\(server.port)/oauth/token: token_type \"mac\" is not bearer")
  }

  @Test func nonJSONErrorStatusUsesTheReasonPhrase() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .answer(status: 503, body: "<html>down</html>")
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port))))
    #expect(message.hasSuffix("answered 503 Service Unavailable"))
  }

  @Test func slowEndpointTimesOut() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .slow(.seconds(5))
    let limits = HTTPOneShotClient.Limits(
      connectTimeout: .seconds(5), answerTimeout: .milliseconds(200), maxAnswerBytes: 65536)
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port), limits: limits)))
    #expect(message.hasSuffix("no complete answer within 200 ms"))
  }

  @Test func garbageIsAnInvalidAnswer() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .garbage
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port))))
    #expect(message.contains("invalid HTTP answer"))
  }

  @Test func invalidJSONInASuccessIsAnError() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .answer(status: 200, body: #"{"access_token": "SECRET-IN-BROKEN-JSON" oops}"#)
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port))))
    #expect(message.contains("answered 200 with invalid JSON (line 1, column"))
    #expect(!message.contains("SECRET-IN-BROKEN-JSON"))
  }

  @Test func closeWithoutAnswerIsReported() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .close
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port))))
    #expect(message.contains("before a complete answer"))
  }

  @Test func oversizedAnswerIsRefused() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .huge(10_000)
    let limits = HTTPOneShotClient.Limits(
      connectTimeout: .seconds(5), answerTimeout: .seconds(5), maxAnswerBytes: 1000)
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: server.port), limits: limits)))
    #expect(message.hasSuffix("answer larger than 1000 bytes"))
  }

  @Test func connectionRefusedIsReported() throws {
    // Bind a port and close it again: nothing listens there afterwards.
    let port = try {
      let listener = try TCPListener(address: .loopback(port: 0))
      defer { listener.close() }
      return listener.localPort
    }()
    let message = try #require(failureMessage(try fetch(try oauth2Config(port: port))))
    #expect(message.hasSuffix("cannot connect: connection refused"))
  }

  @Test func aSlowNameLookupDoesNotHoldTheLoop() throws {
    let server = try TestOAuth2Server()
    defer { server.shutdown() }
    server.mode = .issue(expiresIn: 120)
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.loops[0]
    // The lookup waits until the test has seen the loop run other work: in order, not by time.
    let lookupMayEnd = DispatchSemaphore(value: 0)
    let lookups = Atomic<Int>(0)
    let port = server.port
    let fetcher = OAuth2ClientCredentialsFetcher(limits: OAuth2ClientCredentialsFetcher.defaultLimits) { _, _ in
      lookups.add(1, ordering: .relaxed)
      _ = lookupMayEnd.wait(timeout: .now() + 30)
      return .loopback(port: port)
    }
    let outcome = UncheckedBox<Result<FetchedToken, TokenFetchError>?>(nil)
    try runOnLoop(loop) {
      fetcher.fetch(try oauth2Config(port: 1), on: loop) { outcome.value = $0 }
    }
    #expect(waitFor { lookups.load(ordering: .relaxed) == 1 })
    #expect(try runOnLoop(loop) { outcome.value == nil })  // the loop answers while the lookup is pending
    lookupMayEnd.signal()
    #expect(waitFor { (try? runOnLoop(loop) { outcome.value != nil }) ?? false })
    #expect(try runOnLoop(loop) { try outcome.value?.get().accessToken } == SecretValue("tok-1"))
  }

  @Test func aFailedNameLookupIsReported() throws {
    let group = try EventLoopGroup(loopCount: 1)
    defer { group.shutdown() }
    let loop = group.loops[0]
    struct NoSuchHost: Error, CustomStringConvertible { var description: String { "no such host" } }
    let fetcher = OAuth2ClientCredentialsFetcher(limits: OAuth2ClientCredentialsFetcher.defaultLimits) { _, _ in
      throw NoSuchHost()
    }
    let outcome = UncheckedBox<Result<FetchedToken, TokenFetchError>?>(nil)
    try runOnLoop(loop) {
      fetcher.fetch(try oauth2Config(port: 1), on: loop) { outcome.value = $0 }
    }
    #expect(waitFor { (try? runOnLoop(loop) { outcome.value != nil }) ?? false })
    let message = try #require(try runOnLoop(loop) { outcome.value.flatMap(failureMessage) })
    #expect(message.hasSuffix("cannot resolve host: no such host"))
  }

  // MARK: Interpreting answers without a socket

  func interpret(_ status: Int, _ body: String) -> Result<FetchedToken, TokenFetchError> {
    OAuth2ClientCredentialsFetcher.interpret(
      HTTPOneShotClient.Answer(status: status, headers: HTTPHeaders(), body: Array(body.utf8)))
  }

  @Test func readsExpiresInAsNumberOrString() throws {
    #expect(try interpret(200, #"{"access_token":"a","expires_in":"90"}"#).get().expiresIn == .seconds(90))
    #expect(try interpret(200, #"{"access_token":"a","expires_in":1.5}"#).get().expiresIn == .milliseconds(1500))
    #expect(try interpret(200, #"{"access_token":"a","expires_in":null}"#).get().expiresIn == nil)
  }

  @Test(arguments: [
    (#"{"token_type":"Bearer"}"#, "answer has no access_token"),
    (#"{"access_token":""}"#, "answer has no access_token"),
    (#"{"access_token":42}"#, "answer has no access_token"),
    (#"["access_token"]"#, "answered 200 with JSON that is not an object"),
    (#"{"access_token":"a","expires_in":-5}"#, "answer has an expires_in that is not a positive number of seconds"),
    (#"{"access_token":"a","expires_in":"soon"}"#, "answer has an expires_in that is not a positive number of seconds"),
    (#"{"access_token":"a","expires_in":true}"#, "answer has an expires_in that is not a positive number of seconds"),
  ])
  func refusesAnswersWithoutAUsableToken(_ body: String, _ expected: String) {
    #expect(failureMessage(interpret(200, body)) == expected)
  }

  @Test(
    arguments: [
      (#"{"access_token":"a"}"#, nil),
      (#"{"access_token":"a","token_type":null}"#, nil),
      (#"{"access_token":"a","token_type":"Bearer"}"#, "Bearer"),
      (#"{"access_token":"a","token_type":"bearer"}"#, "bearer"),
      (#"{"access_token":"a","token_type":"BEARER"}"#, "BEARER"),
    ] as [(String, String?)])
  func acceptsABearerTokenOrNoTokenType(_ body: String, _ type: String?) throws {
    #expect(try interpret(200, body).get().tokenType == type)
  }

  /// RFC 6749 §7.1: a token of a type the gateway does not understand is not used.
  @Test(arguments: [
    (#"{"access_token":"a","token_type":"mac"}"#, #"token_type "mac" is not bearer"#),
    (#"{"access_token":"a","token_type":"DPoP"}"#, #"token_type "DPoP" is not bearer"#),
    (#"{"access_token":"a","token_type":""}"#, #"token_type "" is not bearer"#),
    (#"{"access_token":"a","token_type":"bearer "}"#, #"token_type "bearer " is not bearer"#),
    (#"{"access_token":"a","token_type":"x\"\né"}"#, #"token_type "x???" is not bearer"#),
    (
      #"{"access_token":"a","token_type":"0123456789012345678901234567890123456789"}"#,
      #"token_type "01234567890123456789012345678901…" is not bearer"#
    ),
    (#"{"access_token":"a","token_type":1}"#, "token_type is not a string, so not bearer"),
    (#"{"access_token":"a","token_type":["bearer"]}"#, "token_type is not a string, so not bearer"),
  ])
  func refusesATokenTypeOtherThanBearer(_ body: String, _ expected: String) {
    #expect(failureMessage(interpret(200, body)) == expected)
  }

  @Test func errorWithoutDescription() {
    #expect(failureMessage(interpret(401, #"{"error":"unauthorized_client"}"#)) == "answered 401: unauthorized_client")
  }

  // MARK: Encodings

  @Test func formEncodingFollowsRFC6749AppendixB() {
    #expect(FormURLEncoding.encode("abc-._~XYZ019") == "abc-._~XYZ019")
    #expect(FormURLEncoding.encode("a b+c&d=e/f:g%") == "a+b%2Bc%26d%3De%2Ff%3Ag%25")
    #expect(FormURLEncoding.encode("é") == "%C3%A9")
    #expect(FormURLEncoding.form([("a", "1 2"), ("b&", "x")]) == "a=1+2&b%26=x")
  }

  @Test func base64MatchesRFC4648Vectors() {
    let vectors = [
      ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
      ("foobar", "Zm9vYmFy"),
    ]
    for (input, output) in vectors { #expect(Base64.encode(Array(input.utf8)) == output) }
    #expect(Base64.encode([0xFF, 0xFE, 0xFD]) == "//79")
  }

  @Test func fingerprintIsTheFirstEightHexDigitsOfSHA256() {
    // SHA-256("abc") = ba7816bf…
    #expect(TokenFingerprint.of(SecretValue("abc")) == "ba7816bf")
  }

  @Test func redactorMasksSecretsAndTheirEncodingsAndControlCharacters() {
    let redactor = SecretRedactor(["p@ss word"])
    #expect(redactor.redact("x p@ss word y p%40ss+word z\r\n") == "x <redacted> y <redacted> z  ")
    let long = SecretRedactor().redact(String(repeating: "a", count: 1000))
    #expect(long.count == SecretRedactor.maxLength + 1)
  }

  /// A secret that occurs in the mask ("e", "dact") or is too short to mask meaningfully used
  /// to rewrite the masks it had inserted: the message became unreadable and showed where the
  /// secret occurs.
  @Test func redactorNeverRewritesItsOwnMasksAndLeavesTooShortSecretsAlone() {
    let text = "token endpoint: answered 400: redacted scope"
    #expect(SecretRedactor(["e"]).redact(text) == text)
    #expect(SecretRedactor(["dact"]).redact("x dact y") == "x <redacted> y")
    #expect(SecretRedactor(["dact", "edac"]).redact("redacted") == "r<redacted>ted")
    #expect(SecretRedactor(["secret", "secret-long"]).redact("a secret-long b secret") == "a <redacted> b <redacted>")
  }

  @Test func maskingFindsEveryOccurrenceOnceAndCopiesNothingWithoutOne() {
    let secret = SecretSpellings(Array("tok-123".utf8))
    #expect(SecretMasking.masked([secret], in: Array("no secret here".utf8)) == nil)
    let slashed = SecretSpellings(Array("s3cr3t/tok+en".utf8))
    let echoed = SecretMasking.masked([slashed], in: Array(#"{"m":"s3cr3t\/tok+en"}"#.utf8))
    #expect(echoed.map { String(decoding: $0, as: UTF8.self) } == #"{"m":"<redacted>"}"#)
    // JSON `\u` escapes in either case and percent-encoding in any case, mixed too.
    let escaped = SecretMasking.masked(
      [slashed], in: Array(#"{"m":"s3cr3t\u002ftok\u002Ben","u":"/x?t=s3cr3t%2Ftok%2ben"}"#.utf8))
    #expect(escaped.map { String(decoding: $0, as: UTF8.self) } == #"{"m":"<redacted>","u":"/x?t=<redacted>"}"#)
    let masked = SecretMasking.masked([secret], in: Array("tok-123,tok-123tok-123!".utf8))
    #expect(masked.map { String(decoding: $0, as: UTF8.self) } == "<redacted>,<redacted><redacted>!")
    func occurs(_ secret: SecretSpellings, in text: String) -> Bool {
      Array(text.utf8).withUnsafeBufferPointer { SecretMasking.occurs(secret, in: $0) }
    }
    #expect(occurs(secret, in: "Bearer tok-123"))
    #expect(!occurs(secret, in: "Bearer tok-12"))
    #expect(!occurs(SecretSpellings(Array("abc".utf8)), in: "abc"))
  }
}
