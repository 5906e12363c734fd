import GatehouseHTTP

/// A secret and the forms a backend may echo it in, worked out once per value: a token's
/// value gets its spellings when the value is set (`TokenLifecycle`), and every answer that
/// masks it reuses them, so masking encodes nothing per request.
///
/// The forms are the value itself; its hex; and its base64 in the standard and URL-safe
/// alphabets, with and without padding, plus, for each of the three alignments the value
/// can have inside longer encoded data (`Bearer <token>` or a JSON document holding it, sent
/// base64-encoded), the characters that depend on the value's bytes alone. Forms are kept
/// with ASCII letters lowercased, since `SecretMasking` matches without regard to case: a
/// token upper- or lower-cased, hex in either case, is still the token. Base64 is case
/// sensitive, so folding it makes a form match a few more strings than its own; for forms of
/// `minimumFormLength` characters or more, about one chance in 10^12 per position that text
/// which is not the token is masked.
public final class SecretSpellings: Sendable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  /// The secret as it is sent.
  public let value: [UInt8]
  /// What is looked for, lowercased, longest first; empty when the value is shorter than
  /// `SecretMasking.minimumLength` (nothing is looked for).
  let forms: [[UInt8]]
  /// Whether an occurrence may start with this byte (lowercased): a form's first byte, or the
  /// first byte of an escape (`%`, `\`, `&`).
  private let starts: [Bool]
  /// The longest an occurrence can be: the longest form with every byte escaped at its
  /// longest. The streaming masker holds back one less than this between reads.
  let longestOccurrence: Int

  /// Derived forms shorter than this are not looked for: a base64 fragment of a short value
  /// would be a few characters that ordinary text holds by chance.
  static let minimumFormLength = 8

  public init(_ value: [UInt8]) {
    self.value = value
    guard value.count >= SecretMasking.minimumLength else {
      forms = []
      starts = Array(repeating: false, count: 256)
      longestOccurrence = 0
      return
    }
    let standard = Array(Base64.encode(value).utf8)
    var base64 = [standard, Self.unpadded(standard)] + Self.embeddedCores(value)
    base64 += base64.map(Self.urlSafe)
    var forms = [value.map(SecretMasking.lowercased)]
    for form in [Self.hex(value)] + base64 where form.count >= Self.minimumFormLength {
      let folded = form.map(SecretMasking.lowercased)
      if !forms.contains(folded) { forms.append(folded) }
    }
    // Longest first: where two forms start at one place (a padded base64 and the same
    // without its padding), the longer one is masked whole.
    forms.sort { $0.count > $1.count }
    self.forms = forms
    var starts = Array(repeating: false, count: 256)
    for form in forms { starts[Int(form[0])] = true }
    for escape in [UInt8(ascii: "%"), UInt8(ascii: "\\"), UInt8(ascii: "&")] { starts[Int(escape)] = true }
    self.starts = starts
    longestOccurrence = forms[0].count * SecretMasking.maximumEscapeLength
  }

  /// Whether anything is looked for.
  var isSearched: Bool { !forms.isEmpty }

  /// Whether an occurrence may start with `byte`: one table read, so a body is scanned at
  /// about a byte per step where nothing starts.
  @inline(__always)
  func mayStart(_ byte: UInt8) -> Bool { starts[Int(SecretMasking.lowercased(byte))] }

  public var description: String { "SecretSpellings(<redacted>, \(forms.count) forms)" }
  public var debugDescription: String { description }
  public var customMirror: Mirror { Mirror(self, children: ["forms": forms.count]) }

  private static func hex(_ value: [UInt8]) -> [UInt8] {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(value.count * 2)
    for byte in value {
      out.append(digits[Int(byte >> 4)])
      out.append(digits[Int(byte & 0x0F)])
    }
    return out
  }

  private static func unpadded(_ encoded: [UInt8]) -> [UInt8] {
    Array(encoded.prefix { $0 != UInt8(ascii: "=") })
  }

  private static func urlSafe(_ standard: [UInt8]) -> [UInt8] {
    standard.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 }
  }

  /// The base64 characters of `value` encoded after 0, 1 and 2 bytes of other data, without
  /// the characters that also hold bits of the bytes before or after it (the first 0, 2 or 3,
  /// and the last when the value does not end on a 3-byte group): what any base64 of data
  /// holding the value contains, whatever surrounds it.
  private static func embeddedCores(_ value: [UInt8]) -> [[UInt8]] {
    (0..<3).map { shift -> [UInt8] in
      let encoded = unpadded(Array(Base64.encode(Array(repeating: 0, count: shift) + value).utf8))
      let leading = [0, 2, 3][shift]
      let trailing = (shift + value.count) % 3 == 0 ? 0 : 1
      guard encoded.count > leading + trailing else { return [] }
      return Array(encoded[leading..<(encoded.count - trailing)])
    }
  }
}

/// Masks secrets in bytes that came from elsewhere: a backend that echoes the token it was sent
/// in an error ("token abc… is not allowed") must not hand it to the client, who never holds
/// backend credentials; a token endpoint that echoes the client secret must not put it in a
/// log line.
///
/// A secret is found in any of its forms (`SecretSpellings`: as it is, hex, base64), in any
/// case, and with any of its bytes escaped — JSON `\/`, `\\`, `\"` and `\u00XX` (hex digits
/// in either case; an envelope the backend built is passed on unchanged), percent-encoded
/// `%XX` in any case (a token carried in a URL, as a redirect carries it), or an HTML numeric
/// character reference `&#NN;` or `&#xNN;` (an error page), mixed within one occurrence too.
/// Escapes are decoded while matching, so an occurrence may be up to `maximumEscapeLength`
/// times as long as the form; the whole occurrence is masked.
public enum SecretMasking {
  /// What replaces each occurrence.
  public static let mask: [UInt8] = Array("<redacted>".utf8)
  /// Shorter secrets are not looked for: masking them would mark every place the value occurs
  /// in ordinary text (showing what it is) and garble the message.
  public static let minimumLength = 4
  /// The longest spelling of one byte: an HTML reference with its most digits, `&#x00002F;`.
  public static let maximumEscapeLength = 10
  /// Digits an HTML reference may have (leading zeros included): enough for any spelling of
  /// an ASCII byte that a page writes; a longer one is not read as a reference.
  static let maximumDecimalDigits = 7
  static let maximumHexDigits = 6

  /// Whether `secret` occurs in `bytes`, in any spelling.
  public static func occurs(_ secret: SecretSpellings, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
    guard secret.isSearched else { return false }
    var index = 0
    while index < bytes.count {
      if secret.mayStart(bytes[index]), matchLength(secret, bytes, at: index) != nil { return true }
      index += 1
    }
    return false
  }

  /// `bytes` with every occurrence of any of `secrets` (in any spelling) replaced by `mask`,
  /// in one pass that never looks at its own output (so a secret that occurs in the mask does
  /// not mangle it); where two secrets start at the same place the longer one is masked
  /// whole. Nil when nothing was found: the common case costs no copy.
  public static func masked(_ secrets: [SecretSpellings], in bytes: [UInt8]) -> [UInt8]? {
    let candidates = secrets.filter(\.isSearched).sorted { $0.forms[0].count > $1.forms[0].count }
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
  static func firstMatchLength(
    _ secrets: [SecretSpellings], _ source: UnsafeBufferPointer<UInt8>, at index: Int
  ) -> Int? {
    for secret in secrets where secret.mayStart(source[index]) {
      if let length = matchLength(secret, source, at: index) { return length }
    }
    return nil
  }

  /// The length of the occurrence of any of `secret`'s forms (the longest first) that
  /// starts at `index`, or nil.
  static func matchLength(_ secret: SecretSpellings, _ source: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
    for form in secret.forms {
      if let length = matchLength(form: form, source, at: index) { return length }
    }
    return nil
  }

  /// The length of the occurrence of `form` (lowercased) that starts at `index`, in any
  /// case and spelling, or nil (also when the bytes end before it could end). An escape is
  /// read as the byte it stands for before the byte is compared as it is, so `%25` spells `%`.
  static func matchLength(form: [UInt8], _ source: UnsafeBufferPointer<UInt8>, at index: Int) -> Int? {
    var position = index
    for byte in form {
      guard position < source.count else { return nil }
      let first = source[position]
      if first == 0x25 || first == 0x5C || first == 0x26, let (decoded, length) = escape(source, at: position),
        lowercased(decoded) == byte
      {
        position += length
      } else if lowercased(first) == byte {
        position += 1
      } else {
        return nil
      }
    }
    return position - index
  }

  @inline(__always)
  static func lowercased(_ byte: UInt8) -> UInt8 {
    byte &- 0x41 < 26 ? byte | 0x20 : byte
  }

  /// The byte an escape at `index` (starting with `%`, `\` or `&`) stands for, and its length.
  @inline(__always)
  private static func escape(_ source: UnsafeBufferPointer<UInt8>, at index: Int) -> (UInt8, Int)? {
    let remaining = source.count - index
    guard remaining >= 2 else { return nil }
    switch source[index] {
    case 0x25:  // %XX
      guard remaining >= 3, let high = hexValue(source[index + 1]), let low = hexValue(source[index + 2]) else {
        return nil
      }
      return (high << 4 | low, 3)
    case 0x26:  // &#NN; or &#xNN;
      return characterReference(source, at: index)
    default:
      break
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

  /// An HTML numeric character reference at `index` (`&#` then decimal digits, or `&#x` or
  /// `&#X` then hex digits, then `;`, which browsers also read without): the byte of a code
  /// point below 0x80 (a larger one is several bytes of UTF-8, not one) and its length.
  /// Digits are read as browsers read them, all of them: `&#656` is not `A` followed by `6`.
  private static func characterReference(_ source: UnsafeBufferPointer<UInt8>, at index: Int) -> (UInt8, Int)? {
    var position = index + 1
    guard position < source.count, source[position] == 0x23 else { return nil }  // #
    position += 1
    let hex = position < source.count && source[position] | 0x20 == 0x78  // x or X
    if hex { position += 1 }
    let digitsStart = position
    var value = 0
    while position < source.count {
      let digit: UInt8? =
        hex ? hexValue(source[position]) : (source[position] &- 0x30 < 10 ? source[position] - 0x30 : nil)
      guard let digit else { break }
      value = value * (hex ? 16 : 10) + Int(digit)
      position += 1
      if position - digitsStart > (hex ? maximumHexDigits : maximumDecimalDigits) { return nil }
    }
    guard position > digitsStart, value < 0x80 else { return nil }
    if position < source.count, source[position] == 0x3B { position += 1 }  // ;
    return (UInt8(value), position - index)
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
