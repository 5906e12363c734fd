import Foundation
import Testing

/// A backend that echoes the injected token in an error ("token … is not allowed", a debug
/// header) must not hand it to the client (Docs/behaviour.md: clients never hold backend credentials;
/// token values never appear in error messages). 2xx answers are the backend's data and pass
/// as they are; error bodies of pass-through routes stream with the token masked.
@Suite struct TokenEchoTests {
  static let token = "api-SECRET-7d3b91aa55"

  @Test func anErrorAnswerNeverCarriesTheTokenItWasRefusedWith() throws {
    let backend = try TestBackend { request in
      let sent = request.head.value("Authorization") ?? ""
      let status = request.path.hasSuffix("/ok") ? 200 : 403
      return .respond(
        BackendAnswer(
          status: status, reason: status == 200 ? "OK" : "Forbidden",
          headers: [("Content-Type", "application/json"), ("X-Debug-Auth", sent), ("X-Other", "kept")],
          body: .bytes(Array(#"{"message":"token \#(sent.dropFirst(7)) is not allowed","n":1}"#.utf8))))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": Self.token]],
      routes: [
        TestConfig.tokenRoute("wrapped", match: "/e/*", token: "api", extra: ["envelope": ["enabled": true]]),
        TestConfig.tokenRoute("raw", match: "/r/*", token: "api"),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let wrapped = try send("GET", "/e/x", to: gateway.port)
    #expect(wrapped.status == 403)
    #expect(try wrapped.jsonObject()["message"] as? String == "token <redacted> is not allowed")
    #expect(wrapped.head.value("X-Debug-Auth") == nil)
    #expect(wrapped.head.value("X-Other") == "kept")

    let raw = try send("GET", "/r/x", to: gateway.port)
    #expect(raw.status == 403)
    #expect(raw.head.value("X-Debug-Auth") == nil)
    #expect(raw.head.value("X-Other") == "kept")

    // The backend did get the token each time; a 2xx answer is passed on as it is.
    #expect(backend.requests.allSatisfy { $0.head.value("Authorization") == "Bearer \(Self.token)" })
    let fine = try send("GET", "/e/ok", to: gateway.port)
    #expect(fine.status == 200)
    #expect(fine.head.value("X-Debug-Auth") == "Bearer \(Self.token)")
  }

  /// On a pass-through route an error body streams as it is, with the token masked byte for
  /// byte on the way (`*`, so its length stays true), however the upstream's chunks split
  /// it; a 2xx body passes untouched.
  @Test func aPassThroughErrorBodyHasTheTokenMaskedAsItStreams() throws {
    let backend = try TestBackend { request in
      let sent = Array((request.head.value("Authorization") ?? "").dropFirst(7).utf8)
      let body = Array(#"{"message":"token "#.utf8) + sent + Array(#" is not allowed"}"#.utf8)
      let ok = request.path.hasSuffix("/ok")
      let chunked = request.path.hasSuffix("/chunked")
      // `identity` names no coding: the body is plain and is masked like one without the field.
      let identity = request.path.hasSuffix("/identity")
      // The reason phrase may echo it too (`/reason`).
      let reason = request.path.hasSuffix("/reason") ? "bad token " + String(decoding: sent, as: UTF8.self) : "Refused"
      return .respond(
        BackendAnswer(
          status: ok ? 200 : 403, reason: ok ? "OK" : reason,
          headers: [("Content-Type", "application/json")] + (identity ? [("Content-Encoding", "identity")] : []),
          body: chunked ? .chunked([Array(body[..<25]), Array(body[25..<30]), Array(body[30...])]) : .bytes(body)))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": Self.token]],
      routes: [TestConfig.tokenRoute("raw", match: "/*", token: "api")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let masked = #"{"message":"token "# + String(repeating: "*", count: Self.token.utf8.count) + #" is not allowed"}"#
    for path in ["/r/plain", "/r/chunked", "/r/identity"] {
      let answer = try send("GET", path, to: gateway.port)
      #expect(answer.status == 403, "\(path)")
      #expect(answer.text == masked, "\(path)")
    }
    let fine = try send("GET", "/r/ok", to: gateway.port)
    #expect(fine.text.contains(Self.token))
    // A status line that names the token gets the standard phrase instead.
    let reason = try send("GET", "/r/reason", to: gateway.port)
    #expect(reason.head.startLine == "HTTP/1.1 403 Forbidden")
    #expect(!String(decoding: reason.head.raw, as: UTF8.self).contains(Self.token))
    // One that does not is the upstream's own.
    #expect(try send("GET", "/r/plain", to: gateway.port).head.startLine == "HTTP/1.1 403 Refused")
  }

  /// A client that takes gzip does not make the upstream gzip an error that echoes the token
  /// (the gateway could not mask it): on a pass-through token route the upstream is not
  /// asked for gzip. Escaped spellings of the token (JSON `\u002F`/`\u002b`, percent-encoding
  /// in any case) are masked as the body streams.
  @Test func aGzipClientAndEscapedSpellingsStillGetTheTokenMasked() throws {
    let token = "api/SECRET+7d3b91aa55"
    let spellings = [
      #"api\u002FSECRET\u002B7d3b91aa55"#, #"api\u002fSECRET\u002b7d3b91aa55"#, "api%2fSECRET%2b7d3b91aa55",
      "api%2FSECRET%2b7d3b91aa55",
    ]
    let echo = #"{"message":"token "# + token + #" refused","seen":[""# + spellings.joined(separator: #"",""#) + #""]}"#
    let backend = try TestBackend { request in
      let gzip = request.head.value("Accept-Encoding")?.contains("gzip") == true
      let body = Array(echo.utf8)
      return .respond(
        BackendAnswer(
          status: 403, reason: "Forbidden",
          headers: [("Content-Type", "application/json")] + (gzip ? [("Content-Encoding", "gzip")] : []),
          body: .bytes(gzip ? (try? ExternalTool.gzip(body)) ?? body : body)))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": token]],
      routes: [TestConfig.tokenRoute("raw", match: "/*", token: "api")])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let answer = try send("GET", "/r/x", to: gateway.port, headers: [("Accept-Encoding", "gzip")])
    let gzipped = answer.head.value("Content-Encoding")?.contains("gzip") == true
    let text = String(decoding: gzipped ? try ExternalTool.gunzip(answer.body) : answer.body, as: UTF8.self)

    #expect(answer.status == 403)
    #expect(!gzipped)
    #expect(backend.requests.allSatisfy { $0.head.value("Accept-Encoding")?.contains("gzip") != true })
    for spelling in [token] + spellings {
      #expect(!text.contains(spelling), "\(spelling) in \(text)")
    }
    #expect(text.utf8.count == echo.utf8.count)
    #expect(text.hasPrefix(#"{"message":"token ***"#), "\(text)")
  }

  /// A redirect that repeats the token (`Location: /sso?access_token=…` and the same link
  /// in its body, percent-encoded as URLs carry it, or in a gzip body) reaches the client
  /// without it on an enveloped route: the field is left out and the body masked, as for
  /// error answers.
  @Test func aRedirectNeverCarriesTheTokenItWasSentWith() throws {
    let token = "api/SECRET+7d3b=91aa55"
    let gzipped = try ExternalTool.gzip(Array("<a href='/sso?t=api%2fSECRET%2b7d3b%3d91aa55'>here</a>".utf8))
    let backend = try TestBackend { request in
      let sent = String((request.head.value("Authorization") ?? "").dropFirst(7))
      let inURL =
        sent.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~")))
        ?? ""
      switch request.path {
      case "/e/json":
        return .respond(
          BackendAnswer(
            status: 307, reason: "Temporary Redirect",
            headers: [("Content-Type", "application/json"), ("Location", "/v2")],
            body: .bytes(Array(#"{"redirect":"/v2?token=\#(sent)"}"#.utf8))))
      case "/e/gz":
        return .respond(
          BackendAnswer(
            status: 302, reason: "Found",
            headers: [("Content-Type", "text/html"), ("Content-Encoding", "gzip"), ("Location", "/home")],
            body: .bytes(gzipped)))
      default:
        return .respond(
          BackendAnswer(
            status: 302, reason: "Found",
            headers: [("Content-Type", "text/html"), ("Location", "/sso?access_token=\(inURL)")],
            body: .bytes(Array("<html>Moved to <a href='/sso?access_token=\(inURL)'>here</a></html>".utf8))))
      }
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": token]],
      routes: [TestConfig.tokenRoute("wrapped", match: "/e/*", token: "api", extra: ["envelope": ["enabled": true]])])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }

    let html = try send("GET", "/e/login", to: gateway.port)
    #expect(html.status == 302)
    #expect(html.head.value("Location") == nil)
    #expect(html.text == "<html>Moved to <a href='/sso?access_token=<redacted>'>here</a></html>")
    #expect(html.head.contentLength == Int64(html.body.count))

    let json = try send("GET", "/e/json", to: gateway.port)
    #expect(json.status == 307)
    #expect(json.head.value("Location") == "/v2")
    #expect(json.text == #"{"redirect":"/v2?token=<redacted>"}"#)

    let zipped = try send("GET", "/e/gz", to: gateway.port)
    #expect(zipped.status == 302)
    #expect(zipped.head.value("Location") == "/home")
    #expect(!zipped.head.has("Content-Encoding"))
    #expect(zipped.text == "<a href='/sso?t=<redacted>'>here</a>")
    #expect(backend.requests.allSatisfy { $0.head.value("Authorization") == "Bearer \(token)" })
  }

  /// The token the backend echoes encoded: base64 (standard and URL-safe, padded or not, and
  /// the whole `Authorization` line base64-encoded), another case, hex in either case, HTML
  /// numeric references (decimal and hex). None reaches the client: on a pass-through route
  /// the body streams masked byte for byte (its length stays true) however the chunks split
  /// it, on an enveloped route the message is masked whole, and a header carrying an
  /// encoded form is left out.
  /// `sent` encoded as a backend may echo it: base64 and base64url, padded and not, lower and
  /// upper case, hex in either case, HTML decimal and hex references.
  static func encodedForms(_ sent: String) -> [String] {
    let bytes = Array(sent.utf8)
    let base64 = Data(bytes).base64EncodedString()
    let urlSafe = base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
    return [
      base64, String(base64.prefix { $0 != "=" }), urlSafe, String(urlSafe.prefix { $0 != "=" }),
      sent.lowercased(), sent.uppercased(),
      bytes.map { String(format: "%02x", $0) }.joined(), bytes.map { String(format: "%02X", $0) }.joined(),
      bytes.map { "&#\($0);" }.joined(), bytes.map { String(format: "&#x%x;", $0) }.joined(),
    ]
  }

  @Test func encodedEchoesOfTheTokenAreMaskedToo() throws {
    let token = "api>SECRET?~7d3b91aa55"
    let line = Data(Array("Bearer \(token)".utf8)).base64EncodedString()
    let backend = try TestBackend { request in
      let authorization = request.head.value("Authorization") ?? ""
      let sent = String(authorization.dropFirst(7))
      let echoed = Self.encodedForms(sent) + [Data(Array(authorization.utf8)).base64EncodedString()]
      let message = "refused " + echoed.joined(separator: " ")
      let body =
        Array(#"{"message":"\#(message)","seen":[""#.utf8) + Array(echoed.joined(separator: #"",""#).utf8)
        + Array(#""]}"#.utf8)
      let chunked = request.path.hasSuffix("/chunked")
      // Pieces of 7 bytes: every form is split across reads, most more than once.
      let pieces = stride(from: 0, to: body.count, by: 7).map { Array(body[$0..<min($0 + 7, body.count)]) }
      return .respond(
        BackendAnswer(
          status: 403, reason: "Forbidden",
          headers: [
            ("Content-Type", "application/json"), ("X-Debug-Token", echoed[0]), ("X-Debug-Hex", echoed[6]),
            ("X-Other", "kept"),
          ],
          body: chunked ? .chunked(pieces) : .bytes(body)))
    }
    defer { backend.stop() }
    let config = TestConfig.withTokens(
      upstreamPort: backend.port, tokens: ["api": ["type": "static", "value": token]],
      routes: [
        TestConfig.tokenRoute("wrapped", match: "/e/*", token: "api", extra: ["envelope": ["enabled": true]]),
        TestConfig.tokenRoute("raw", match: "/*", token: "api"),
      ])
    let gateway = try GatewayProcess(config: config)
    defer { gateway.stopExpectingCleanExit() }
    let everyForm = Self.encodedForms(token) + [line]

    for path in ["/r/plain", "/r/chunked"] {
      let answer = try send("GET", path, to: gateway.port)
      #expect(answer.status == 403, "\(path)")
      let seen = try #require(try answer.jsonObject()["seen"] as? [String], "\(path): \(answer.text)")
      #expect(seen.count == everyForm.count, "\(path)")
      for (form, masked) in zip(everyForm, seen) where form != line {
        #expect(masked == String(repeating: "*", count: form.utf8.count), "\(path): \(form) became \(masked)")
      }
      // The Authorization line's base64: the characters that hold the token's bits alone are
      // masked (the first and last few also hold bits of "Bearer " and of nothing).
      let lineMasked = try #require(seen.last)
      #expect(lineMasked.count == line.count && lineMasked.hasPrefix("QmVhcmVyI"), "\(lineMasked)")
      #expect(lineMasked.filter { $0 == "*" }.count >= token.utf8.count * 4 / 3 - 2, "\(lineMasked)")
      for form in everyForm { #expect(!answer.text.contains(form), "\(path): \(form) in \(answer.text)") }
      #expect(answer.head.value("X-Debug-Token") == nil && answer.head.value("X-Debug-Hex") == nil, "\(path)")
      #expect(answer.head.value("X-Other") == "kept", "\(path)")
    }
    let wrapped = try send("GET", "/e/x", to: gateway.port)
    #expect(wrapped.status == 403)
    let message = try #require(try wrapped.jsonObject()["message"] as? String, "\(wrapped.text)")
    #expect(message.hasPrefix("refused <redacted> <redacted>"), "\(message)")
    for form in everyForm { #expect(!wrapped.text.contains(form), "\(form) in \(wrapped.text)") }
    #expect(wrapped.head.value("X-Debug-Token") == nil)
    #expect(backend.requests.allSatisfy { $0.head.value("Authorization") == "Bearer \(token)" })
  }
}
