import GatehouseCore
import GatehouseJSON

/// Turns admin answers into aligned text.
enum AdminFormat {
  /// A JSON value as a table cell: strings bare, null as `-`.
  static func text(_ value: JSONValue?) -> String {
    switch value {
    case nil, .null?: return "-"
    case .string(let text)?: return text
    case .bool(let flag)?: return flag ? "true" : "false"
    case .number(let number)?:
      if let integer = number.integer { return String(integer) }
      return String(number.double)
    case let other?: return other.serializedString()
    }
  }

  /// `name  value` lines for an object; nested objects as `outer.inner`.
  static func keyValues(_ value: JSONValue) -> [String] {
    var rows: [[String]] = []
    func walk(_ value: JSONValue, _ prefix: String) {
      guard case .object(let members) = value else { return }
      for (key, member) in members {
        if case .object = member {
          walk(member, prefix + key + ".")
        } else {
          rows.append([prefix + key, text(member)])
        }
      }
    }
    walk(value, "")
    return table(header: nil, rows: rows)
  }

  static func purged(_ value: JSONValue) -> [String] {
    ["purged \(text(value["purged"]))"]
  }

  static func entries(_ entries: [JSONValue]) -> [String] {
    let columns = [
      "id", "route", "method", "upstream", "path", "query", "status", "bytes", "age_s", "stored_at", "user",
    ]
    let rows = entries.map { entry in columns.map { text(entry[$0]) } }
    return table(header: columns.map { $0.uppercased() }, rows: rows) + ["\(entries.count) entries"]
  }

  static func tokens(_ tokens: [JSONValue]) -> [String] {
    let columns = ["name", "type", "state", "fingerprint", "expires_at", "refreshed_at", "last_error"]
    return table(header: columns.map { $0.uppercased() }, rows: tokens.map { token in columns.map { text(token[$0]) } })
  }

  static func jwtProviders(_ providers: [JSONValue]) -> [String] {
    let columns = ["name", "issuer", "key_ids", "fetched_at", "last_error"]
    return table(
      header: columns.map { $0.uppercased() },
      rows: providers.map { provider in
        columns.map { column in
          guard column == "key_ids" else { return text(provider[column]) }
          let ids = provider[column]?.arrayValue?.map { text($0) } ?? []
          return ids.isEmpty ? "\(text(provider["keys"])) without kid" : ids.joined(separator: ",")
        }
      })
  }

  /// The upstreams, then a blank line and their endpoints, one line each.
  static func upstreams(_ upstreams: [JSONValue]) -> [String] {
    let columns = ["name", "address", "health", "circuit", "open_connections", "idle_connections", "last_error"]
    let header = ["NAME", "ADDRESS", "HEALTH", "CIRCUIT", "OPEN", "IDLE", "LAST_ERROR"]
    let summary = table(
      header: header,
      rows: upstreams.map { upstream in
        columns.map { column in
          // An open route circuit shows beside the upstream's own: `closed, open routes: a,b`.
          let routes = upstream["open_routes"]?.arrayValue?.map { text($0) } ?? []
          guard column == "circuit", !routes.isEmpty else { return text(upstream[column]) }
          return text(upstream[column]) + ", open routes: " + routes.joined(separator: ",")
        }
      })
    let endpointColumns = [
      "address", "weight", "state", "in_flight", "requests", "failures", "ejected_until", "last_error",
    ]
    let rows = upstreams.flatMap { upstream in
      (upstream["endpoints"]?.arrayValue ?? []).map { endpoint in
        [text(upstream["name"])] + endpointColumns.map { text(endpoint[$0]) }
      }
    }
    guard !rows.isEmpty else { return summary }
    let endpointHeader = [
      "UPSTREAM", "ENDPOINT", "WEIGHT", "STATE", "IN_FLIGHT", "REQUESTS", "FAILURES", "EJECTED_UNTIL", "LAST_ERROR",
    ]
    return summary + [""] + table(header: endpointHeader, rows: rows)
  }

  /// Columns padded to their widest cell, two spaces apart; the last column is not padded.
  static func table(header: [String]?, rows: [[String]]) -> [String] {
    let all = (header.map { [$0] } ?? []) + rows
    guard let width = all.first?.count else { return [] }
    var widths = [Int](repeating: 0, count: width)
    for row in all { for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) } }
    return all.map { row in
      var line = ""
      for (index, cell) in row.enumerated() {
        line += cell
        if index < row.count - 1 { line += String(repeating: " ", count: widths[index] - cell.count + 2) }
      }
      return line
    }
  }
}
