import GatehouseHTTP
import Testing

@testable import GatehouseCore

/// What the store keeps of an upstream answer, by status and fields, and by route kind.
@Suite struct CacheStorabilityTests {
  static func storable(
    _ status: Int = 200, _ fields: [(String, String)], keyed: [String] = [], enveloped: Bool = false
  ) -> Bool {
    CacheStorability.isStorable(status: status, headers: HTTPHeaders(fields), keyed: keyed, enveloped: enveloped)
  }

  @Test func whatIsKeptAndWhatIsNot() {
    let json = ("Content-Type", "application/json")
    #expect(Self.storable(200, [json, ("ETag", #""a""#), ("Cache-Control", "max-age=60")]))
    #expect(Self.storable(204, []))
    #expect(Self.storable(200, [json, ("Vary", "Accept-Language")], keyed: ["accept-language"]))
    #expect(!Self.storable(206, [json]))
    #expect(!Self.storable(301, [("Location", "/x")]))
    #expect(!Self.storable(200, [json, ("Set-Cookie", "a=b")]))
    #expect(!Self.storable(200, [json, ("Cache-Control", "public, no-store")]))
    #expect(!Self.storable(200, [json, ("Vary", "Cookie")]))
    #expect(!Self.storable(200, [json, ("Content-Encoding", "br")]))
  }

  /// A 2xx `Location` names what that request made or must poll (a 201's resource, a 202's
  /// job): nobody else's answer.
  @Test func anAnswerWithALocationIsNotKept() {
    let json = ("Content-Type", "application/json")
    #expect(!Self.storable(201, [json, ("Location", "/orders/7")]))
    #expect(!Self.storable(202, [json, ("location", "/jobs/9")]))
    #expect(!Self.storable(200, [json, ("LOCATION", "https://elsewhere.example/")], enveloped: true))
    #expect(Self.storable(200, [json, ("Content-Location", "/orders/7")]))
    #expect(
      CacheStorability.refusal(status: 201, headers: HTTPHeaders([("Location", "/o")]), keyed: [], enveloped: false)
        == "location")
  }

  /// An HTML page is kept on a route that passes bodies through (it is what the backend
  /// serves), not on an enveloped one (its clients take JSON; such a page is one put in
  /// front of the backend).
  @Test func aPageIsNotKeptOnAnEnvelopedRoute() {
    for type in ["text/html", "text/html; charset=utf-8", " TEXT/HTML;charset=UTF-8", "application/xhtml+xml"] {
      #expect(Self.storable(200, [("Content-Type", type)]), "\(type)")
      #expect(!Self.storable(200, [("Content-Type", type)], enveloped: true), "\(type)")
    }
    for type in ["application/json", "image/png", "text/plain", "text/htmlx", "application/html+json"] {
      #expect(Self.storable(200, [("Content-Type", type)], enveloped: true), "\(type)")
    }
    #expect(
      CacheStorability.refusal(
        status: 200, headers: HTTPHeaders([("Content-Type", "text/html")]), keyed: [], enveloped: true)
        == "content-type")
  }
}
