import GatehouseHTTP
import GatehouseJSON
import GatehouseLogging

/// An admin answer: JSON unless stated otherwise, never enveloped (Docs/admin-openapi.json).
public struct AdminAnswer: Sendable {
  public var status: Int
  public var contentType: String
  public var body: [UInt8]
  public var extraHeaders: [(String, String)]
  /// Facts for the admin action's log line (`AdminAudit`), such as how many entries a purge
  /// removed; never sent.
  package var auditFacts: [LogField] = []

  public init(
    status: Int, contentType: String = "application/json", body: [UInt8], extraHeaders: [(String, String)] = []
  ) {
    self.status = status
    self.contentType = contentType
    self.body = body
    self.extraHeaders = extraHeaders
  }

  public static func json(_ value: JSONValue, status: Int = 200) -> AdminAnswer {
    AdminAnswer(status: status, body: value.serializedBytes())
  }

  public static func error(_ status: Int, _ message: String) -> AdminAnswer {
    json(.object([("error", .string(message))]), status: status)
  }

  /// 400 about one query parameter, named in `parameter` so a client need not parse `error`.
  public static func badParameter(_ name: String, _ message: String) -> AdminAnswer {
    json(.object([("error", .string(message)), ("parameter", .string(name))]), status: 400)
  }

  /// On every admin answer, errors and 401s included: no browser guesses a type other than
  /// `Content-Type` (a JSON body quoting a request must not run as HTML), no page frames an
  /// answer (the dashboard's buttons cannot be clickjacked), and no request made from the
  /// dashboard names it in a `Referer`.
  static let protectionHeaders = [
    ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
  ]

  /// Serializes the whole answer for `method` (HEAD answers carry no body).
  func serialized(requestID: [UInt8], headOnly: Bool, close: Bool) -> [UInt8] {
    var headers = HTTPHeaders()
    headers.add(name: "Content-Type", value: contentType)
    headers.add(name: "Cache-Control", value: "no-store")
    headers.add(name: "X-Request-Id", value: String(decoding: requestID, as: UTF8.self))
    for (name, value) in Self.protectionHeaders { headers.add(name: name, value: value) }
    for (name, value) in extraHeaders { headers.add(name: name, value: value) }
    if close { headers.add(name: "Connection", value: "close") }
    var out: [UInt8] = []
    let allowsBody = HTTPSerializer.statusAllowsBody(status)
    do {
      try HTTPSerializer.writeResponseHead(
        status: status, headers: headers, framing: allowsBody ? .contentLength(Int64(body.count)) : .none,
        into: &out)
    } catch {
      // Only our own constant fields are written here; a failure is a programming error.
      preconditionFailure("admin answer head: \(error)")
    }
    if allowsBody && !headOnly { out.append(contentsOf: body) }
    return out
  }
}
