import GatehouseJSON

#if canImport(Glibc)
  import Glibc
#endif

/// The config `gatehouse serve` uses when there is no config file (Config/README.md, "No config file"): loopback only,
/// a fresh admin token, the store in a temp directory, and two stub routes so a newcomer sees
/// enveloped answers without any backend.
public enum DefaultConfig {
  /// The demo routes' canned bodies: the `/users` list and one user for `/users/:id`.
  static let usersBody = #"[{"id":1,"name":"hoge"},{"id":2,"name":"fuga"}]"#
  static let userBody = #"{"id":1,"name":"hoge"}"#

  /// The default config as a JSON document, for `GET /admin/routes`-style display and tests.
  public static func document(adminToken: String, storePath: String) -> JSONValue {
    // Inserted strings go through `${...}` expansion like any config string, so a '${' in
    // them is escaped; the token is hex and never has one.
    let store = storePath.replacing("${", with: "$${")
    let text = """
      {
        "listen": [{ "address": "127.0.0.1:8080" }],
        "admin": { "listen": "127.0.0.1:9901", "token": \(JSONValue.string(adminToken).serializedString()) },
        "store": { "path": \(JSONValue.string(store).serializedString()) },
        "routes": [
          {
            "name": "users",
            "match": { "path": "/users", "methods": ["GET"] },
            "stub": { "mode": "always", "status": 200, "body": \(usersBody) }
          },
          {
            "name": "user",
            "match": { "path": "/users/:id", "methods": ["GET"] },
            "stub": { "mode": "always", "status": 200, "body": \(userBody) }
          }
        ],
        "log": { "level": "info", "access": "stdout", "format": "json" }
      }
      """
    return try! JSONParser.parse(text)
  }

  /// The default config with the given admin token and store file.
  public static func make(adminToken: String, storePath: String) -> GatehouseConfig {
    do {
      return try ConfigLoader.load(
        document: document(adminToken: adminToken, storePath: storePath), environment: [:])
    } catch {
      // The embedded config is tested; failing here is a programming error, not a user's.
      preconditionFailure("embedded default config is invalid: \(error.lines.joined(separator: "; "))")
    }
  }

  /// What `serve` runs without a config file: a new private temp directory for the store,
  /// and as admin token `environmentToken` (`GATEHOUSE_ADMIN_TOKEN`, so `gatehouse admin`
  /// works with the variable it already reads) when it is usable, else a random one that
  /// the caller prints once (`generatedToken`). `ignoredEnvironmentToken` says a set
  /// variable was not usable (empty, or not printable ASCII without spaces).
  public static func makeForServe(environmentToken: String? = nil) throws -> (
    config: GatehouseConfig, generatedToken: String?, ignoredEnvironmentToken: Bool
  ) {
    let directory = try makeTemporaryDirectory()
    let usable = environmentToken.flatMap { isUsableAdminToken($0) ? $0 : nil }
    let token = usable ?? randomAdminToken()
    return (
      make(adminToken: token, storePath: directory + "/gatehouse.sqlite"), usable == nil ? token : nil,
      environmentToken != nil && usable == nil
    )
  }

  /// A bearer token the admin API can compare: visible ASCII only (no spaces, no controls).
  static func isUsableAdminToken(_ token: String) -> Bool {
    !token.isEmpty && token.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
  }

  /// 32 random bytes as 64 hex digits, from the system's cryptographic generator.
  public static func randomAdminToken() -> String {
    var generator = SystemRandomNumberGenerator()
    let hexDigits = Array("0123456789abcdef")
    var token = ""
    token.reserveCapacity(64)
    for _ in 0..<32 {
      let byte = UInt8.random(in: 0...255, using: &generator)
      token.append(hexDigits[Int(byte >> 4)])
      token.append(hexDigits[Int(byte & 0x0F)])
    }
    return token
  }

  /// A new directory only this user can read (`mkdtemp` creates it with mode 0700), under
  /// `TMPDIR` when that is set, as other programs do, else /tmp.
  public static func makeTemporaryDirectory() throws -> String {
    try makeTemporaryDirectory(under: temporaryBase(tmpdir: getenv("TMPDIR").map { String(cString: $0) }))
  }

  /// Where temporary directories go: `tmpdir` (the value of `TMPDIR`) when set, else /tmp,
  /// without trailing slashes.
  static func temporaryBase(tmpdir: String?) -> String {
    var base = tmpdir ?? ""
    if base.isEmpty { base = "/tmp" }
    while base.utf8.count > 1 && base.hasSuffix("/") { base.removeLast() }
    return base
  }

  /// A new directory only this user can read, in `base`.
  static func makeTemporaryDirectory(under base: String) throws -> String {
    var template = Array((base + "/gatehouse-XXXXXX").utf8CString)
    guard let result = mkdtemp(&template) else {
      throw LocalFile.Failure("create a directory in", base, LocalFile.describe(errno))
    }
    return String(cString: result)
  }
}
