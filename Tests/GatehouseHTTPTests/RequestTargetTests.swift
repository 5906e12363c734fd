import GatehouseHTTP
import Testing

/// The request-target rules (RFC 9112 §3.2 and RFC 3986, read strictly): only origin-form
/// paths reach routing, dot segments are refused however they are spelled, and the path
/// holds only the bytes a URI path may hold.
@Suite struct RequestTargetTests {
  func request(_ target: String, method: String = "GET") -> String {
    "\(method) \(target) HTTP/1.1\r\nHost: a\r\n\r\n"
  }

  func target(_ text: String, method: String = "GET") throws -> String? {
    try parseRequests(request(text, method: method)).first?.requestHead?.targetString
  }

  func error(_ text: String, method: String = "GET") -> HTTPParseError? {
    requestError(request(text, method: method))
  }

  @Test(arguments: [
    "/..", "/.", "/a/..", "/a/.", "/a/../b", "/a/./b", "/p/../../admin/secret", "/users/..", "/..?x=1",
    "/users/%2e%2e", "/users/%2E%2E", "/a/.%2e/b", "/a/%2e./b", "/a/%2E", "/a/%2e?q", "/a/..;jsessionid=1/b",
    "/a/.;x", "/a/..%2Fadmin", "/a/..%2fadmin", "/a/..%5Cadmin", "/a/%2e%2e%5cadmin", "/./a", "/a/%2e%2F",
    "/a/%2F..", "/a%5C..%5Cb", "/a/b%2f.%2fc",
  ])
  func dotSegmentsAreRefused(_ path: String) {
    #expect(error(path) == .dotSegment, "\(path)")
    #expect(error(path).map(\.status) == 400)
  }

  /// A dot segment ended by an encoded `;` (servlet containers drop `;parameters` after
  /// decoding) or an encoded NUL (C code ends the string there) is still `..` to someone.
  @Test(arguments: [
    "/a/..%3B/b", "/a/..%3bx/admin", "/a/.%3B", "/a/%2e%2e%3b", "/a/..%00", "/a/..%00/b", "/a/.%00", "/e/..%3F",
    "/e/..%3f", "/e/..%23", "/e/..%20", "/e/..%09", "/e/..%0a", "/e/..%0D",
  ])
  func dotSegmentsEndedByAnEncodedSemicolonOrNulAreRefused(_ path: String) {
    #expect(error(path) == .dotSegment, "\(path)")
  }

  /// NUL anywhere in the path, and overlong UTF-8 (`%C0%AE` is `.` and `%C0%AF` is `/` to
  /// decoders that accept it; no valid UTF-8 holds `%C0`, `%C1`, `%E0` followed by
  /// `%80`-`%9F`, or `%F0` followed by `%80`-`%8F`), are refused: 400.
  @Test(arguments: [
    "/a%00b", "/a/%00", "/%c0%ae%c0%ae/admin", "/a/%C0%AE%C0%AE/b", "/a/%c0%af..", "/a/%c1%9c",
    "/a/%e0%80%ae%e0%80%ae/b",
    "/a/%F0%80%80%AE", "/a/x%C0%AE",
  ])
  func nulAndOverlongUTF8AreRefusedInThePath(_ path: String) {
    #expect(error(path) == .invalidTarget, "\(path)")
    #expect(error(path).map(\.status) == 400)
  }

  /// Valid UTF-8, encoded, is kept: three- and four-byte sequences included.
  @Test(arguments: ["/caf%C3%A9", "/%E0%A4%85", "/%E2%82%AC", "/%F0%9F%98%80", "/%C2%A0", "/a?x=%00&y=%C0%AE"])
  func validEncodedUTF8IsKept(_ path: String) throws {
    #expect(try target(path) == path)
  }

  @Test func dotSegmentsInAbsoluteFormAreRefusedToo() {
    #expect(error("http://example.com/a/../b") == .dotSegment)
    #expect(error("https://example.com/%2e%2e") == .dotSegment)
  }

  /// Dots that are not a whole segment are ordinary names; the query is not a path.
  @Test(arguments: [
    "/...", "/a/.../b", "/a/..b", "/a/b..", "/a/.hidden", "/v1.2/x", "/a/%2e%2e%2e", "/a/%2ex", "/a/x%2e%2e",
    "/a?p=../..", "/a?..", "/a/b?x=/./", "/file.json", "/a/..%41",
  ])
  func dotsInsideNamesAndQueriesAreKept(_ text: String) throws {
    #expect(try target(text) == text)
  }

  @Test func otherEscapesAreNotDecoded() throws {
    #expect(try target("/a%2Fb/%41/caf%C3%A9") == "/a%2Fb/%41/caf%C3%A9")
    #expect(try target("/a/b%2E%2e/%2F.x/%5C%2e%2E%2e") == "/a/b%2E%2e/%2F.x/%5C%2e%2E%2e")
  }

  @Test(arguments: ["/a%", "/a%4", "/a%G1", "/a%%41", "/a%4g", "/a/..%2"])
  func percentWithoutTwoHexDigitsIsRefusedInThePath(_ path: String) {
    #expect(error(path) == .invalidTarget, "\(path)")
  }

  /// Every byte a path may not hold unencoded is refused there; the query keeps nginx's and
  /// HAProxy's rule (visible ASCII but `#`), since the gateway forwards it unread.
  @Test func pathBytesFollowRFC3986() throws {
    let allowed = Set(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@/".utf8)
    for byte in UInt8(0x21)...UInt8(0xFF) where byte != 0x25 && byte != 0x3F {
      let raw = Array("GET /a".utf8) + [byte] + Array("b HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
      let failure = requestError(raw)
      if allowed.contains(byte) {
        #expect(failure == nil, "byte \(byte) refused")
      } else {
        #expect(failure == .invalidTarget, "byte \(byte): \(String(describing: failure))")
      }
    }
    for character in #""<>\^`{|}[]"#.utf8 {
      let raw = Array("GET /a?q=".utf8) + [character] + Array(" HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
      #expect(requestError(raw) == nil, "byte \(character) refused in the query")
    }
    #expect(error("/a?q=#") == .invalidTarget)
    #expect(error("/a?q=\u{7F}") == .invalidTarget)
  }

  @Test func connectAndTraceAreNeverServed() {
    for text in ["example.com:443", "/x", "*"] {
      #expect(error(text, method: "CONNECT") == .methodNotSupported)
    }
    #expect(error("/x", method: "TRACE") == .methodNotSupported)
    #expect(HTTPParseError.methodNotSupported.status == 501)
    // Only the exact (case-sensitive) method names: "connect" is just an unknown method.
    #expect(error("/x", method: "connect") == nil)
  }

  @Test func asteriskFormIsRefused() {
    #expect(error("*", method: "OPTIONS") == .asteriskForm)
    #expect(HTTPParseError.asteriskForm.status == 400)
    #expect(error("*", method: "GET") == .invalidTarget)
    #expect(error("*x", method: "OPTIONS") == .invalidTarget)
  }

  @Test func authorityFormIsRefusedForOtherMethods() {
    #expect(error("example.com:443") == .invalidTarget)
    #expect(error("example.com:443", method: "OPTIONS") == .invalidTarget)
  }

  @Test func absoluteFormIsReadAsItsPathAndQuery() throws {
    #expect(try target("http://example.com/users/7?x=1") == "/users/7?x=1")
    #expect(try target("HTTPS://example.com:8443/a") == "/a")
    #expect(try target("Http://[::1]:80/a") == "/a")
    #expect(try target("http://example.com") == "/")
    #expect(try target("http://example.com/") == "/")
  }

  @Test(arguments: [
    "http://user:pass@example.com/a", "http://@example.com/a", "http:///a", "http://", "http://host?q",
    "http://host#x", "ftp://host/a", "http:/host/a", "httpx://host/a", "http://ho\"st/a", "http://host/a\\b",
  ])
  func malformedAbsoluteFormIsRefused(_ text: String) {
    #expect(error(text) == .invalidTarget, "\(text)")
  }
}
