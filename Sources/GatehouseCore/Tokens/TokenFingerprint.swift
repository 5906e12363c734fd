import CGatehouseOpenSSL
import GatehouseConfig

/// The admin API's way to tell token values apart without showing them: the first 8 hex digits of the
/// value's SHA-256 (Docs/behaviour.md). 32 bits say "changed or not" and give nothing usable to guess the value.
public enum TokenFingerprint {
  public static func of(_ value: SecretValue) -> String {
    of(bytes: Array(value.value.utf8))
  }

  public static func of(bytes: [UInt8]) -> String {
    String(sha256Hex(bytes).prefix(8))
  }

  /// The full lowercase hex SHA-256 of `bytes`.
  static func sha256Hex(_ bytes: [UInt8]) -> String {
    var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
    var length: UInt32 = 0
    let ok = bytes.withUnsafeBytes { input in
      digest.withUnsafeMutableBufferPointer { output in
        EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, EVP_sha256(), nil)
      }
    }
    precondition(ok == 1 && length == 32, "SHA-256 failed")
    let hexDigits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    text.reserveCapacity(64)
    for byte in digest.prefix(32) {
      text.append(hexDigits[Int(byte >> 4)])
      text.append(hexDigits[Int(byte & 0x0F)])
    }
    return String(decoding: text, as: UTF8.self)
  }
}

/// Removes known secrets from text that came from elsewhere (an error body, an errno message) before it is
/// kept as `last_error` or logged: a misbehaving token endpoint may echo the client secret or a token.
struct SecretRedactor {
  /// The replacement for every occurrence of a secret.
  static let mask = "<redacted>"
  /// Error text is for operators, not for carrying payloads; longer text is cut.
  static let maxLength = 300

  private var secrets: [String] = []
  private var spellings: [SecretSpellings] = []

  init(_ secrets: [String] = []) {
    for secret in secrets { add(secret) }
  }

  /// Adds a secret, plus the encodings in which it goes over the wire.
  mutating func add(_ secret: String) {
    guard !secret.isEmpty else { return }
    for form in [secret, FormURLEncoding.encode(secret)] where !secrets.contains(form) {
      secrets.append(form)
      spellings.append(SecretSpellings(Array(form.utf8)))
    }
  }

  /// `text` with every secret masked (in one pass: a secret that occurs in the mask or in
  /// another secret's form leaves the mask alone; secrets shorter than
  /// `SecretMasking.minimumLength` are not looked for), control characters replaced by
  /// spaces, and cut to `maxLength`.
  func redact(_ text: String) -> String {
    var result = text
    if let masked = SecretMasking.masked(spellings, in: Array(text.utf8)) {
      result = String(decoding: masked, as: UTF8.self)
    }
    var cleaned = String(
      String.UnicodeScalarView(result.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : $0 }))
    if cleaned.count > Self.maxLength { cleaned = String(cleaned.prefix(Self.maxLength)) + "…" }
    // Masking first, cutting second: a cut could otherwise leave a secret's prefix that no longer matches.
    return cleaned
  }
}
