/// Masks secrets in bytes that came from elsewhere: a backend that echoes the token it was sent
/// in an error ("token abc… is not allowed") must not hand it to the client, who never holds
/// backend credentials (SPEC §3); a token endpoint that echoes the client secret must not put
/// it in a log line.
///
/// A secret is found in any spelling a backend may echo it in: as it is, and with any of its
/// bytes escaped — JSON `\/`, `\\`, `\"` and `\u00XX` (hex digits in either case; an
/// envelope the backend built is passed on unchanged), or percent-encoded `%XX` in any case
/// (a token carried in a URL, as a redirect carries it), mixed within one occurrence too.
/// Escapes are decoded while matching, so an occurrence may be up to `maximumEscapeLength`
/// times as long as the secret; the whole occurrence is masked.
public enum SecretMasking {
  /// What replaces each occurrence.
  public static let mask: [UInt8] = Array("<redacted>".utf8)
  /// Shorter secrets are not looked for: masking them would mark every place the value occurs
  /// in ordinary text (showing what it is) and garble the message.
  public static let minimumLength = 4
  /// The longest spelling of one byte: `\u002F`.
  public static let maximumEscapeLength = 6

  /// Whether `secret` occurs in `bytes`, in any spelling.
  public static func occurs(_ secret: [UInt8], in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard secret.count >= minimumLength, bytes.count >= secret.count else { return false }
    var index = 0
    while index + secret.count <= bytes.count {
      if matchLength(secret, bytes, at: index) != nil { return true }
      index += 1
    }
    return false
  }

  /// `bytes` with every occurrence of any of `secrets` (in any spelling) replaced by `mask`,
  /// in one pass that never looks at its own output (so a secret that occurs in the mask does
  /// not mangle it); where two secrets start at the same place the longer one is masked
  /// whole. Nil when nothing was found: the common case costs no copy.
  public static func masked(_ secrets: [[UInt8]], in bytes: [UInt8]) -> [UInt8]? {
    let candidates = secrets.filter { $0.count >= minimumLength && $0.count <= bytes.count }
      .sorted { $0.count > $1.count }
    guard !candidates.isEmpty else { return nil }
    return bytes.withUnsafeBufferPointer { source -> [UInt8]? in
      var result: [UInt8]?
      var copied = 0
      var index = 0
      while index < source.count {
        guard let length = firstMatchLength(candidates, source, at: index) else {
          index += 1
          continue
        }
        if result == nil { result = Array(repeating: 0, count: 0) }
        result!.append(contentsOf: source[copied..<index])
        result!.append(contentsOf: mask)
        index += length
        copied = index
      }
      guard var done = result else { return nil }
      done.append(contentsOf: source[copied...])
      return done
    }
  }

  /// The length of the occurrence of the first of `secrets` (longest first) that starts at
  /// `index`, or nil.
  @inline(__always)
  static func firstMatchLength(_ secrets: [[UInt8]], _ source: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
    for secret in secrets {
      if let length = matchLength(secret, source, at: index) { return length }
    }
    return nil
  }

  /// The length of the occurrence of `secret` that starts at `index`, in any spelling, or nil
  /// (also when the bytes end before it could end). An escape is read as the byte it stands
  /// for before the byte is compared as it is, so `%25` spells `%`.
  static func matchLength(_ secret: [UInt8], _ source: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
    var position = index
    for byte in secret {
      guard position < source.count else { return nil }
      let first = source[position]
      if first == 0x25 || first == 0x5C, let (decoded, length) = escape(source, at: position), decoded == byte {
        position += length
      } else if first == byte {
        position += 1
      } else {
        return nil
      }
    }
    return position - index
  }

  /// The byte an escape at `index` (starting with `%` or `\`) stands for, and its length.
  @inline(__always)
  private static func escape(_ source: UnsafeBufferPointer<UInt8>, at index: Int) -> (UInt8, Int)? {
    let remaining = source.count - index
    guard remaining >= 2 else { return nil }
    if source[index] == 0x25 {  // %XX
      guard remaining >= 3, let high = hexValue(source[index + 1]), let low = hexValue(source[index + 2]) else {
        return nil
      }
      return (high << 4 | low, 3)
    }
    switch source[index + 1] {
    case 0x2F, 0x5C, 0x22: return (source[index + 1], 2)  // \/ \\ \"
    case 0x75:  // \u00XX: only bytes below 0x80 are one code point each
      guard remaining >= 6, source[index + 2] == 0x30, source[index + 3] == 0x30,
        let high = hexValue(source[index + 4]), high < 8, let low = hexValue(source[index + 5])
      else { return nil }
      return (high << 4 | low, 6)
    default: return nil
    }
  }

  @inline(__always)
  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x41 + 10
    case 0x61...0x66: return byte - 0x61 + 10
    default: return nil
    }
  }
}
