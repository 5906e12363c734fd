import Foundation

/// Makes signing keys and JWTs at test time with `Tests/Tools/jwtmint.py` (Debian
/// `python3-jwt` and `python3-cryptography`: an implementation independent of the
/// gateway's own), so no key or token is committed to the repository.
final class JWTMinter {
  static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Tools/jwtmint.py").path
  static let python = "/usr/bin/python3"

  /// Private keys live here (deleted with the minter).
  let directory: URL

  init() throws {
    directory = FileManager.default.temporaryDirectory.appendingPathComponent("gatehouse-jwt-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  }

  deinit { try? FileManager.default.removeItem(at: directory) }

  /// A new key (`rsa`, `ec256`, `ec384`, `ed25519`) named `kid`; its public JWK.
  func key(_ kind: String, kid: String) throws -> [String: Any] {
    let output = try ExternalTool.run(Self.python, [Self.script, "keys", directory.path, kind, kid], input: [])
    guard let jwk = try JSONSerialization.jsonObject(with: Data(output)) as? [String: Any] else {
      throw ToolError(description: "jwtmint printed no JWK")
    }
    return jwk
  }

  /// A JWKS document of `keys`.
  static func jwks(_ keys: [[String: Any]]) -> [String: Any] { ["keys": keys] }

  /// A token signed with key `kid` (made by `key`) and `alg`; `headerKid` is the `kid` the
  /// header carries (nil: none); `header` adds members to the header.
  func sign(
    kid: String, alg: String, claims: [String: Any], headerKid: String?? = .none, header: [String: Any] = [:]
  ) throws -> String {
    let claimsText = String(decoding: try JSONSerialization.data(withJSONObject: claims), as: UTF8.self)
    let headerText = String(decoding: try JSONSerialization.data(withJSONObject: header), as: UTF8.self)
    let kidArgument: String
    switch headerKid {
    case .none: kidArgument = kid
    case .some(nil): kidArgument = "-"
    case .some(.some(let other)): kidArgument = other
    }
    let pem = directory.appendingPathComponent(kid + ".pem").path
    let output = try ExternalTool.run(
      "/usr/bin/env",
      ["HEADER_JSON=" + headerText, Self.python, Self.script, "sign", pem, alg, kidArgument, claimsText],
      input: [])
    return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
  }

  /// An HS256 token whose HMAC secret is key `kid`'s public key as PEM: the algorithm
  /// confusion attack on verifiers that take the key's bytes as a secret.
  func confusedHS256(kid: String, claims: [String: Any]) throws -> String {
    let pem = directory.appendingPathComponent(kid + ".pem").path
    let publicPEM = try ExternalTool.run(Self.python, [Self.script, "public", pem], input: [])
    let secret = directory.appendingPathComponent(kid + ".public.pem")
    try Data(publicPEM).write(to: secret)
    let claimsText = String(decoding: try JSONSerialization.data(withJSONObject: claims), as: UTF8.self)
    let output = try ExternalTool.run(Self.python, [Self.script, "hs256", secret.path, claimsText], input: [])
    return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
  }

  /// Claims good for ten minutes from now, for `subject`, plus `extra`.
  static func claims(
    subject: String, issuer: String = "https://id.test/", audience: String = "mobile", extra: [String: Any] = [:]
  ) -> [String: Any] {
    let now = Int(Date().timeIntervalSince1970)
    var claims: [String: Any] = ["sub": subject, "iss": issuer, "aud": audience, "iat": now, "exp": now + 600]
    for (key, value) in extra { claims[key] = value }
    return claims
  }
}
