import GatehouseHTTP

/// Decodes a `headers` block (top level and per route): the fields to set, remove and pass.
/// It reports only through the fields it reads, so it needs no state of its own.
enum HeaderRulesDecoder {
  /// `{"set": {...}, "remove": [...]}`, used at the top level and in routes.
  static func decode(_ field: ConfigField) -> HeaderRules {
    guard let object = field.object() else { return .empty }
    var set: [HeaderField] = []
    if let setObject = object.field("set")?.object() {
      var seen: [String: String] = [:]
      for (name, valueField) in setObject.allFields() {
        guard let value = valueField.string() else { continue }
        if !HTTPFieldSyntax.isToken(name) {
          valueField.report("invalid header name (letters, digits and !#$%&'*+-.^_`|~ only)")
          continue
        }
        if let problem = HeaderRuleSyntax.setProblem(name) {
          valueField.report(problem)
          continue
        }
        // `X-A` and `x_a` would reach a CGI-style backend as one variable: say which wins.
        let canonical = HTTPFieldSyntax.canonicalName(name)
        if let earlier = seen[canonical] {
          valueField.report(
            "header \(name) is already set as \(earlier) (header names ignore case, and '_' reads as '-')")
          continue
        }
        if let problem = HTTPFieldSyntax.headerValueProblem(value) ?? hostProblem(name, value) {
          valueField.report(problem)
          continue
        }
        seen[canonical] = name
        set.append(HeaderField(name: name, value: value))
      }
    }
    var remove: [String] = []
    for element in object.field("remove")?.array() ?? [] {
      guard let name = element.headerName() else { continue }
      if let problem = HeaderRuleSyntax.removeProblem(name) {
        element.report(problem)
        continue
      }
      remove.append(name)
    }
    var pass: [String] = []
    for element in object.field("pass")?.array() ?? [] {
      guard let name = element.headerName() else { continue }
      // The fields the gateway manages (hop-by-hop, framing, its own X-Forwarded-*,
      // Host) are never a client's to pass.
      if HeaderRuleSyntax.ManagedHeader(canonicalName: HTTPFieldSyntax.canonicalName(name)) != nil {
        element.report("\(name) is never passed: the gateway sets or drops it itself")
        continue
      }
      pass.append(name)
    }
    let forwarded = object.field("forwarded")?.bool()
    object.finishReading()
    return HeaderRules(set: set, remove: remove, pass: pass, forwarded: forwarded)
  }

  private static func hostProblem(_ name: String, _ value: String) -> String? {
    name.lowercased() == "host" ? HeaderRuleSyntax.hostValueProblem(value) : nil
  }
}
