import GatehouseAdmin
import GatehouseJSON
import GatehouseNet

/// The token endpoints of the admin API (Docs/admin-openapi.json). They run on the control loop, where the
/// token manager lives; no answer ever carries a token value.
///
/// Made for one request; the work it schedules holds the server until it is done.
struct TokenAdministration: Sendable {
  let server: GatewayServer

  func answer(_ endpoint: AdminEndpoint, body: [UInt8], completion: @escaping @Sendable (AdminAnswer) -> Void) {
    nonisolated(unsafe) let manager = server.tokenManager
    switch endpoint {
    case .tokens:
      // The rejections are counted per loop (where answers are read), the states kept on the
      // control loop: both are read where they live.
      server.gather({ $0.metrics.tokenRejections }) { perLoop in
        var rejections: [String: [String: UInt64]] = [:]
        for counts in perLoop {
          for (key, count) in counts { rejections[key.token, default: [:]][key.route, default: 0] &+= count }
        }
        let summed = rejections
        server.onControl {
          let listed = manager.tokenStates().map { state in
            Self.listing(state, rejections: summed[state.name] ?? [:])
          }
          completion(.json(.object([("tokens", .array(listed))])))
        }
      }
    case .setToken(let name):
      let request: (value: String, expiresIn: Duration?)
      switch Self.setTokenRequest(body) {
      case .success(let parsed): request = parsed
      case .failure(let problem):
        completion(.error(400, problem.message))
        return
      }
      server.onControl {
        let result = manager.setToken(named: name, value: request.value, expiresIn: request.expiresIn)
        var answer = Self.answer(result)
        // The `admin action` line is the one record of an operator's set: it names the new
        // value by its fingerprint (the manager logs nothing of its own for admin calls).
        if case .success(let state) = result, let fingerprint = state.fingerprint {
          answer.auditFacts = [("fingerprint", .string(fingerprint))]
        }
        completion(answer)
      }
    case .refreshToken(let name):
      server.onControl {
        manager.refreshToken(named: name) { result in completion(Self.answer(result)) }
      }
    case .invalidateToken(let name):
      server.onControl {
        completion(Self.answer(manager.invalidateToken(named: name)))
      }
    default:
      completion(.error(404, "not a token endpoint"))
    }
  }

  /// A token in `GET /admin/tokens`: its public state, and how often backends rejected it,
  /// by route (a static token stays `valid` when one endpoint refuses it).
  static func listing(_ state: TokenPublicState, rejections: [String: UInt64]) -> JSONValue {
    guard case .object(var members) = state.json else { return state.json }
    let byRoute = rejections.keys.sorted().map { route in (route, JSONValue.int(rejections[route]!)) }
    members.append(("rejections", .object(byRoute)))
    return .object(members)
  }

  static func answer(_ result: Result<TokenPublicState, TokenOperationError>) -> AdminAnswer {
    switch result {
    case .success(let state):
      return .json(state.json)
    case .failure(let error):
      if case .refreshFailed(let lastError) = error {
        return .json(.object([("error", .string("refresh failed")), ("last_error", .string(lastError))]), status: 502)
      }
      return .error(error.httpStatus, error.description)
    }
  }

  /// `{"value": "...", "expires_in": 3600}`; `expires_in` is optional (seconds, > 0).
  struct BadRequest: Error {
    let message: String
  }

  static func setTokenRequest(_ body: [UInt8]) -> Result<(value: String, expiresIn: Duration?), BadRequest> {
    let document: JSONValue
    do {
      document = try JSONParser.parse(body, limits: JSONParser.Limits(maxBytes: 65536, maxDepth: 8))
    } catch {
      return .failure(BadRequest(message: "body must be a JSON object: \(error)"))
    }
    guard case .object(let members) = document else {
      return .failure(BadRequest(message: "body must be a JSON object"))
    }
    var value: String?
    var expiresIn: Duration?
    for (key, member) in members {
      switch key {
      case "value":
        guard case .string(let text) = member, !text.isEmpty else {
          return .failure(BadRequest(message: "value must be a non-empty string"))
        }
        value = text
      case "expires_in":
        if case .null = member { continue }
        // JSON Schema counts 600.0 as an integer too.
        guard case .number(let number) = member,
          let seconds = number.integer
            ?? (number.double.rounded() == number.double && abs(number.double) < 1e15 ? Int64(number.double) : nil),
          seconds > 0, seconds <= 315_360_000
        else {
          return .failure(BadRequest(message: "expires_in must be an integer from 1 to 315360000 (seconds)"))
        }
        expiresIn = .seconds(seconds)
      default:
        return .failure(BadRequest(message: "unknown member \(key)"))
      }
    }
    guard let value else { return .failure(BadRequest(message: "value is required")) }
    return .success((value, expiresIn))
  }
}
