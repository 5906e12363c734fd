/// Masks secrets in bytes that came from elsewhere: a backend that echoes the token it was sent
/// in an error ("token abc… is not allowed") must not hand it to the client, who never holds
/// backend credentials (SPEC §3); a token endpoint that echoes the client secret must not put
/// it in a log line.
public enum SecretMasking {
  /// What replaces each occurrence.
  public static let mask: [UInt8] = Array("<redacted>".utf8)
  /// Shorter secrets are not looked for: masking them would mark every place the value occurs
  /// in ordinary text (showing what it is) and garble the message.
  public static let minimumLength = 4

  /// Whether `secret` occurs in `bytes`.
  public static func occurs(_ secret: [UInt8], in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard secret.count >= minimumLength, bytes.count >= secret.count else { return false }
    var index = 0
    while index + secret.count <= bytes.count {
      if matches(secret, bytes, at: index) { return true }
      index += 1
    }
    return false
  }

  /// `bytes` with every occurrence of any of `secrets` replaced by `mask`, in one pass that
  /// never looks at its own output (so a secret that occurs in the mask does not mangle it);
  /// where two secrets start at the same place the longer one is masked whole. Nil when
  /// nothing was found: the common case costs no copy.
  public static func masked(_ secrets: [[UInt8]], in bytes: [UInt8]) -> [UInt8]? {
    let candidates = secrets.filter { $0.count >= minimumLength && $0.count <= bytes.count }
      .sorted { $0.count > $1.count }
    guard !candidates.isEmpty else { return nil }
    return bytes.withUnsafeBufferPointer { source -> [UInt8]? in
      var result: [UInt8]?
      var copied = 0
      var index = 0
      while index < source.count {
        guard let secret = candidates.first(where: { matches($0, source, at: index) }) else {
          index += 1
          continue
        }
        if result == nil { result = Array(repeating: 0, count: 0) }
        result!.append(contentsOf: source[copied..<index])
        result!.append(contentsOf: mask)
        index += secret.count
        copied = index
      }
      guard var done = result else { return nil }
      done.append(contentsOf: source[copied...])
      return done
    }
  }

  /// `secret` as it may appear inside a JSON string: as it is, and with `/` written `\/` (as
  /// PHP's encoder and others do) — an envelope the backend built is passed on unchanged, so
  /// the token may be there in either spelling.
  public static func jsonForms(of secret: [UInt8]) -> [[UInt8]] {
    guard secret.contains(0x2F) else { return [secret] }
    var escaped: [UInt8] = []
    escaped.reserveCapacity(secret.count + 8)
    for byte in secret {
      if byte == 0x2F { escaped.append(0x5C) }
      escaped.append(byte)
    }
    return [secret, escaped]
  }

  /// Every spelling of `secret` a backend may echo it in: its JSON forms, and
  /// percent-encoded (`%2B`, `%2f`…: a token carried in a URL, as a redirect carries it).
  public static func forms(of secret: [UInt8]) -> [[UInt8]] {
    var all = jsonForms(of: secret)
    for digits in [upperHex, lowerHex] {
      let encoded = percentEncoded(secret, digits: digits)
      if !all.contains(encoded) { all.append(encoded) }
    }
    return all
  }

  private static let upperHex = Array("0123456789ABCDEF".utf8)
  private static let lowerHex = Array("0123456789abcdef".utf8)

  /// RFC 3986 §2.3: the bytes a URL carries as they are.
  private static func isUnreserved(_ byte: UInt8) -> Bool {
    (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte)
      || byte == 0x2D || byte == 0x2E || byte == 0x5F || byte == 0x7E
  }

  private static func percentEncoded(_ secret: [UInt8], digits: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(secret.count * 3)
    for byte in secret {
      if isUnreserved(byte) {
        out.append(byte)
      } else {
        out.append(0x25)
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0F)])
      }
    }
    return out
  }

  @inline(__always)
  static func matches(_ secret: [UInt8], _ source: UnsafeBufferPointer<UInt8>, at index: Int) -> Bool {
    guard index + secret.count <= source.count else { return false }
    var offset = 0
    while offset < secret.count {
      if source[index + offset] != secret[offset] { return false }
      offset += 1
    }
    return true
  }
}
