import Foundation
import GatehouseHTTP
import GatehouseJSON
import Testing

@testable import GatehouseAdmin

/// The static admin documents: the OpenAPI description (kept identical to
/// `Docs/admin-openapi.json`, and checked against the router) and the dashboard page.
@Suite struct AdminDocumentTests {
  static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

  static func document() throws -> JSONValue {
    try JSONParser.parse(Array(AdminOpenAPI.document.utf8))
  }

  @Test func servedDocumentIsTheDocsFile() throws {
    let url = Self.repository.appendingPathComponent("Docs/admin-openapi.json")
    var file = try String(contentsOf: url, encoding: .utf8)
    // The Swift literal cannot end with a newline; the file does.
    if file.hasSuffix("\n") { file.removeLast() }
    #expect(
      file == AdminOpenAPI.document,
      "Docs/admin-openapi.json and AdminOpenAPI.swift differ: run Scripts/sync-admin-openapi.sh")
  }

  @Test func documentIsOpenAPI31WithBearerSecurity() throws {
    let document = try Self.document()
    #expect(document["openapi"] == .string("3.1.0"))
    let scheme = document["components"]?["securitySchemes"]?["bearerAuth"]
    #expect(scheme?["type"] == .string("http"))
    #expect(scheme?["scheme"] == .string("bearer"))
    #expect(document["security"] == .array([.object([("bearerAuth", .array([]))])]))
  }

  /// Every `$ref` names a component that exists.
  @Test func everyReferenceResolves() throws {
    let document = try Self.document()
    var references: [String] = []
    func walk(_ value: JSONValue) {
      switch value {
      case .object(let members):
        for (key, member) in members {
          if key == "$ref", case .string(let target) = member { references.append(target) } else { walk(member) }
        }
      case .array(let items): items.forEach(walk)
      default: break
      }
    }
    walk(document)
    #expect(!references.isEmpty)
    for reference in references {
      let parts = reference.split(separator: "/").dropFirst().map(String.init)
      var node: JSONValue? = document
      for part in parts { node = node?[part] }
      #expect(reference.hasPrefix("#/") && node != nil, "unresolved \(reference)")
    }
  }

  /// Each documented operation is one the router knows, open exactly when the router lets
  /// it be, and protected ones document 401; every router endpoint is documented.
  @Test func operationsMatchTheRouter() throws {
    let document = try Self.document()
    guard case .object(let paths)? = document["paths"] else {
      Issue.record("no paths")
      return
    }
    var documented: Set<String> = []
    for (path, item) in paths {
      guard case .object(let members) = item else { continue }
      for (method, operation) in members where method != "parameters" {
        let concrete = path.replacingOccurrences(of: "{id}", with: "abc").replacingOccurrences(
          of: "{name}", with: "api")
        guard case .endpoint(let endpoint) = AdminRouter.route(method: HTTPMethod(method.uppercased()), path: concrete)
        else {
          Issue.record("\(method) \(path) is documented but not routed")
          continue
        }
        documented.insert("\(endpoint)".split(separator: "(").first.map(String.init) ?? "")
        let open = operation["security"] == .array([])
        #expect(open == !endpoint.requiresToken(metricsPublic: false), "\(method) \(path) security")
        let responses = operation["responses"]
        if !open { #expect(responses?["401"] != nil, "\(method) \(path) lacks 401") }
        #expect(responses?["200"] != nil, "\(method) \(path) lacks 200")
        // The documented query parameters are exactly those the server accepts (any
        // other is refused with 400).
        var queryNames: [String] = []
        if case .array(let parameters)? = operation["parameters"] {
          for parameter in parameters where parameter["in"] == .string("query") {
            if case .string(let name)? = parameter["name"] { queryNames.append(name) }
          }
        }
        #expect(queryNames == endpoint.queryParameters, "\(method) \(path) query parameters")
        if !queryNames.isEmpty { #expect(responses?["400"] != nil, "\(method) \(path) lacks 400") }
      }
    }
    let all: [AdminEndpoint] = [
      .healthz, .readyz, .metrics, .status, .cacheStats, .cacheEntries, .cacheEntry(id: ""), .purgeCacheEntry(id: ""),
      .purgeCacheEntries, .purgeCache, .tokens, .setToken(name: ""), .refreshToken(name: ""),
      .invalidateToken(name: ""), .routes, .upstreams, .history, .reload, .dashboard, .openAPI,
      .purgeRouteCache(name: ""),
    ]
    for endpoint in all {
      let name = "\(endpoint)".split(separator: "(").first.map(String.init) ?? ""
      #expect(documented.contains(name), "\(name) is not documented")
    }
  }

  @Test func dashboardIsSelfContained() {
    // The SVG namespace names the charts' element type; nothing is fetched from it.
    let html = AdminDashboard.html.replacingOccurrences(of: "\"http://www.w3.org/2000/svg\"", with: "")
    #expect(html.hasPrefix("<!doctype html>"))
    let found = ["src=", "href=", "@import", "url(", "http://", "https://", "innerHTML"].filter { html.contains($0) }
    #expect(found == [], "the dashboard must not load or inject anything")
    #expect(html.contains("default-src 'none'"))
  }

  /// The page's one script runs by its hash, nothing inline else would: no
  /// `'unsafe-inline'` for scripts, no markup event handlers, and the hash is of the exact
  /// text between the page's `<script>` tags.
  @Test func dashboardScriptIsAllowedByItsHashOnly() throws {
    let html = AdminDashboard.html
    let policy = AdminDashboard.contentSecurityPolicy
    let scriptSources = try #require(policy.split(separator: ";").first { $0.contains("script-src") })
    #expect(!scriptSources.contains("unsafe-inline"))
    #expect(scriptSources.contains("'sha256-"))
    #expect(policy.contains("frame-ancestors 'none'"))
    #expect(html.contains("content=\"\(AdminDashboard.pagePolicy)\""))
    #expect(html.components(separatedBy: "<script>").count == 2)
    #expect(html.contains("<script>" + AdminDashboard.script + "</script>"))
    let digest = try #require(Data(base64Encoded: String(AdminDashboard.scriptSource.dropFirst(8).dropLast())))
    #expect(Array(digest) == AdminAuthorizer.sha256(Array(AdminDashboard.script.utf8)))
    let markup = html.replacingOccurrences(of: AdminDashboard.script, with: "")
    #expect(markup.range(of: #"<[^>]*\son[a-z]+\s*="#, options: .regularExpression) == nil)
  }

  @Test func dashboardCarriesTheIdsTestsRead() {
    let html = AdminDashboard.html
    for id in [
      "req-total", "req-rate", "cache-entries", "cache-hits", "cache-misses", "purge-all", "purge-prefix",
      "purge-prefix-button", "tokens-body", "upstreams-body", "error-banner", "login", "token-input", "routes-body",
      "history-error",
    ] {
      #expect(html.contains("id=\"\(id)\""), "missing id \(id)")
    }
    #expect(html.contains("sessionStorage"))
    #expect(!html.contains("localStorage"))
  }
}
