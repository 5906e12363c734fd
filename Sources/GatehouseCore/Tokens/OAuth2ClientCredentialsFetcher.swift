import GatehouseConfig
import GatehouseHTTP
import GatehouseJSON
import GatehouseNet

/// A token as a token endpoint issued it.
public struct FetchedToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  public let accessToken: SecretValue
  /// Nil when the endpoint did not say: the token is used until a backend rejects it.
  public let expiresIn: Duration?
  /// As sent (`Bearer` in any case), or nil when the endpoint left it out; any other type is
  /// refused when the answer is read. The route's `token_format` decides the header.
  public let tokenType: String?

  public init(accessToken: SecretValue, expiresIn: Duration?, tokenType: String?) {
    self.accessToken = accessToken
    self.expiresIn = expiresIn
    self.tokenType = tokenType
  }

  public var description: String {
    "FetchedToken(accessToken: <redacted>, expiresIn: \(expiresIn.map { "\($0)" } ?? "nil"), "
      + "tokenType: \(tokenType ?? "nil"))"
  }
  public var debugDescription: String { description }
  public var customMirror: Mirror {
    Mirror(self, children: ["expiresIn": expiresIn as Any, "tokenType": tokenType as Any])
  }
}

/// Why a fetch failed, as an operator reads it in `last_error`. Never contains the client secret or a token.
public struct TokenFetchError: Error, Sendable, Equatable, CustomStringConvertible {
  public let message: String

  public init(_ message: String) {
    self.message = message
  }

  public var description: String { message }
}

/// Gets a new token for an oauth2 token. `TokenManager` uses one fetcher for all its tokens.
public protocol TokenFetcher: AnyObject {
  /// Starts a fetch. `completion` runs exactly once, on `loop`, and never from inside this call.
  func fetch(
    _ config: OAuth2ClientCredentialsConfig, on loop: EventLoop,
    completion: @escaping (Result<FetchedToken, TokenFetchError>) -> Void)
}

/// The OAuth 2 client credentials grant (RFC 6749 §4.4) over `HTTPOneShotClient`: a form POST with
/// `grant_type=client_credentials` (and `scope`), client authentication with HTTP Basic (§2.3.1: id and
/// secret form-encoded, then joined with `:` and base64-encoded), and a JSON answer.
public final class OAuth2ClientCredentialsFetcher: TokenFetcher {
  /// Timeouts and size limit for every fetch. The defaults suit a token endpoint on a network: a login
  /// that takes longer than 10 s is better retried than waited for.
  public var limits: HTTPOneShotClient.Limits { client.limits }
  private let client: URLFetcher

  public static let defaultLimits = HTTPOneShotClient.Limits(
    connectTimeout: .seconds(5), answerTimeout: .seconds(10), maxAnswerBytes: 64 * 1024)

  public convenience init(limits: HTTPOneShotClient.Limits = OAuth2ClientCredentialsFetcher.defaultLimits) {
    self.init(limits: limits) { host, port in try UpstreamPlan.resolve(host: host, port: port) }
  }

  /// `resolve` turns the endpoint's host into an address; it runs on a helper thread, never on the loop.
  init(limits: HTTPOneShotClient.Limits, resolve: @escaping @Sendable (String, UInt16) throws -> SocketAddress) {
    client = URLFetcher(limits: limits, resolve: resolve)
  }

  public func fetch(
    _ config: OAuth2ClientCredentialsConfig, on loop: EventLoop,
    completion: @escaping (Result<FetchedToken, TokenFetchError>) -> Void
  ) {
    let url = config.tokenURL
    let credentials = FormURLEncoding.encode(config.clientID) + ":" + FormURLEncoding.encode(config.clientSecret.value)
    let basic = Base64.encode(Array(credentials.utf8))
    var redactor = SecretRedactor([config.clientSecret.value])
    redactor.add(basic)
    let prefix = "token endpoint \(url): "
    var fields: [(name: String, value: String)] = [("grant_type", "client_credentials")]
    if let scope = config.scope { fields.append(("scope", scope)) }
    let request = HTTPOneShotClient.Request(
      method: .post, target: url.basePath.isEmpty ? "/" : url.basePath,
      headers: HTTPHeaders([
        ("Host", url.hostHeader),
        ("Authorization", "Basic " + basic),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Accept", "application/json"),
        ("Connection", "close"),
      ]),
      body: Array(FormURLEncoding.form(fields).utf8))
    client.send(request, to: url, on: loop) { result in
      switch result {
      case .failure(let failure):
        completion(.failure(TokenFetchError(redactor.redact(prefix + failure.description))))
      case .success(let answer):
        completion(Self.interpret(answer).mapError { TokenFetchError(redactor.redact(prefix + $0.message)) })
      }
    }
  }

  /// Reads a token endpoint's answer. Messages quote only the endpoint's `error` and `error_description`.
  static func interpret(_ answer: HTTPOneShotClient.Answer) -> Result<FetchedToken, TokenFetchError> {
    let parsed = Result { () throws(JSONError) in
      try JSONParser.parse(answer.body, limits: JSONParser.Limits(maxBytes: 1 << 20, maxDepth: 16))
    }
    guard (200..<300).contains(answer.status) else {
      var message = "answered \(answer.status)"
      let json = try? parsed.get()
      if case .string(let code)? = json?["error"] {
        message += ": \(code)"
        if case .string(let text)? = json?["error_description"], !text.isEmpty { message += " (\(text))" }
      } else {
        message += " " + HTTPStatusPhrase.reason(for: answer.status)
      }
      return .failure(TokenFetchError(message))
    }
    let object: JSONValue
    switch parsed {
    case .success(let value):
      object = value
    case .failure(let error):
      // The parser's reason may quote bytes of the body; the position is enough to find the problem.
      return .failure(
        TokenFetchError("answered \(answer.status) with invalid JSON (line \(error.line), column \(error.column))"))
    }
    guard case .object = object else {
      return .failure(TokenFetchError("answered \(answer.status) with JSON that is not an object"))
    }
    guard case .string(let accessToken)? = object["access_token"], !accessToken.isEmpty else {
      return .failure(TokenFetchError("answer has no access_token"))
    }
    var expiresIn: Duration?
    switch object["expires_in"] {
    case nil, .null?:
      expiresIn = nil
    case .number(let number)?:
      guard number.double > 0, number.double < 1e9 else {
        return .failure(TokenFetchError("answer has an expires_in that is not a positive number of seconds"))
      }
      expiresIn = .milliseconds(Int64(number.double * 1000))
    case .string(let text)?:
      // Some endpoints send the number as a string.
      guard let seconds = Int64(text), seconds > 0, seconds < 1_000_000_000 else {
        return .failure(TokenFetchError("answer has an expires_in that is not a positive number of seconds"))
      }
      expiresIn = .seconds(seconds)
    case .bool?, .array?, .object?:
      return .failure(TokenFetchError("answer has an expires_in that is not a positive number of seconds"))
    }
    let tokenType: String?
    switch acceptedTokenType(object["token_type"]) {
    case .success(let type): tokenType = type
    case .failure(let error): return .failure(error)
    }
    return .success(FetchedToken(accessToken: SecretValue(accessToken), expiresIn: expiresIn, tokenType: tokenType))
  }

  /// RFC 6749 §7.1: a client must not use a token whose type it does not understand, and the
  /// gateway sends every token as a bearer token (RFC 6750): a `mac` or DPoP token needs a
  /// proof the gateway does not make, so it would only fail at the backend, request after
  /// request. A missing `token_type` is taken as bearer (some endpoints leave it out); the
  /// value is compared ignoring case, as §5.1 says.
  static func acceptedTokenType(_ value: JSONValue?) -> Result<String?, TokenFetchError> {
    switch value {
    case nil, .null?:
      return .success(nil)
    case .string(let type)? where type.lowercased() == "bearer":
      return .success(type)
    case .string(let type)?:
      return .failure(TokenFetchError("token_type \(quotedForMessage(type)) is not bearer"))
    case .number?, .bool?, .array?, .object?:
      return .failure(TokenFetchError("token_type is not a string, so not bearer"))
    }
  }

  /// The endpoint's text as `last_error` may show it: quoted, at most 32 characters, and
  /// only printable ASCII (the rest as `?`), so an odd answer cannot garble a log line.
  private static func quotedForMessage(_ text: String) -> String {
    let limit = 32
    var out = ""
    for scalar in text.unicodeScalars.prefix(limit) {
      out.unicodeScalars.append((0x20...0x7E).contains(scalar.value) && scalar != "\"" ? scalar : "?")
    }
    return "\"" + out + (text.unicodeScalars.count > limit ? "…" : "") + "\""
  }
}
