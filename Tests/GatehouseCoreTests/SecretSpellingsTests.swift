import Foundation
import Testing

@testable import GatehouseConfig
@testable import GatehouseCore

/// A token echoed in another encoding is still the token: base64 (standard and URL-safe,
/// padded or not, alone or inside longer encoded data), another case, hex, HTML numeric
/// references. Each is masked whole, in a body read whole and in one that streams in pieces
/// split anywhere; the encodings are made once per value.
@Suite struct SecretSpellingsTests {
  /// 22 bytes (base64 ends in `==`), with bytes whose base64 holds `+` and `/`.
  static let token = "tok>SECRET?~7d3b91aa55"
  static var secret: [UInt8] { Array(token.utf8) }

  static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }
  static func urlSafe(_ text: String) -> String {
    text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
  }
  static func hex(_ bytes: [UInt8], upper: Bool) -> String {
    bytes.map { String(format: upper ? "%02X" : "%02x", $0) }.joined()
  }

  /// A body segment and what the client must get for it: `masked` is the range of the
  /// segment's bytes that become `*`.
  struct Case {
    let name: String
    let text: String
    let masked: Range<Int>

    init(_ name: String, _ text: String, masked: Range<Int>? = nil) {
      self.name = name
      self.text = text
      self.masked = masked ?? 0..<text.utf8.count
    }

    var expected: [UInt8] {
      var bytes = Array(text.utf8)
      for index in masked { bytes[index] = StreamingSecretMasker.maskByte }
      return bytes
    }
  }

  /// `prefix + secret + suffix` base64-encoded (in `alphabet`), and the characters that
  /// hold the secret's bits alone: from the first whole one after the prefix to the last
  /// whole one before the suffix.
  static func embedded(_ name: String, prefix: String, suffix: String, urlSafe: Bool = false) -> Case {
    let data = Array(prefix.utf8) + secret + Array(suffix.utf8)
    let standard = base64(data)
    let start = (Array(prefix.utf8).count * 8 + 5) / 6
    let end = (Array(prefix.utf8).count + secret.count) * 8 / 6
    return Case(name, urlSafe ? Self.urlSafe(standard) : standard, masked: start..<end)
  }

  static var cases: [Case] {
    let standard = base64(secret)
    let unpadded = String(standard.prefix { $0 != "=" })
    let decimal = secret.map { "&#\($0);" }.joined()
    let hexReferences = secret.map { String(format: "&#x%x;", $0) }.joined()
    let upperReferences = secret.map { String(format: "&#X%02X;", $0) }.joined()
    // Some bytes as references, some not, one without its `;` (browsers read it so).
    let mixed = "tok&#62;SEC&#x52;ET&#63~7d3b91aa55"
    // The Bearer line's base64 has a `/` among the secret's characters: JSON may escape it.
    let bearer = embedded("", prefix: "Bearer ", suffix: "\r\n")
    let slashes = Array(bearer.text.utf8)[..<bearer.masked.upperBound].filter { $0 == UInt8(ascii: "/") }.count
    let jsonEscaped = Case(
      "base64 in JSON", bearer.text.replacingOccurrences(of: "/", with: #"\/"#),
      masked: bearer.masked.lowerBound..<(bearer.masked.upperBound + slashes))
    let percent = standard.replacingOccurrences(of: "+", with: "%2B").replacingOccurrences(of: "=", with: "%3d")
    return [
      Case("as sent", token),
      Case("lowercased", token.lowercased()),
      Case("uppercased", token.uppercased()),
      Case("base64 padded", standard),
      Case("base64 unpadded", unpadded),
      Case("base64url padded", urlSafe(standard)),
      Case("base64url unpadded", urlSafe(unpadded)),
      jsonEscaped,
      Case("base64 in a URL", percent),
      embedded("base64 of a Bearer line", prefix: "Bearer ", suffix: "\r\n"),
      embedded("base64url of a Bearer line", prefix: "Bearer ", suffix: "\r\n", urlSafe: true),
      embedded("base64 of a document", prefix: #"{"t":""#, suffix: #""}"#),
      embedded("base64 two bytes in", prefix: "ab", suffix: "!"),
      Case("hex", hex(secret, upper: false)),
      Case("HEX", hex(secret, upper: true)),
      Case("decimal references", decimal),
      Case("hex references", hexReferences),
      Case("upper hex references", upperReferences),
      Case("mixed references", mixed),
    ]
  }

  static func run(_ body: [UInt8], cuts: [Int]) -> [UInt8] {
    var masker = StreamingSecretMasker(secrets: [SecretSpellings(secret)])!
    var out: [UInt8] = []
    var start = 0
    for cut in cuts + [body.count] where cut >= start {
      out += Array(body[start..<cut]).withUnsafeBytes { masker.process($0) }
      start = cut
    }
    return out + masker.finish()
  }

  @Test func eachEncodingIsMaskedInABodyReadWhole() throws {
    let spellings = SecretSpellings(Self.secret)
    for item in Self.cases {
      let body = Array(#"{"message":"refused "#.utf8) + Array(item.text.utf8) + Array(#" here"}"#.utf8)
      let masked = try #require(SecretMasking.masked([spellings], in: body), "\(item.name)")
      let text = String(decoding: masked, as: UTF8.self)
      let kept = String(decoding: Array(item.text.utf8)[..<item.masked.lowerBound], as: UTF8.self)
      #expect(text.hasPrefix(#"{"message":"refused "# + kept + "<redacted>"), "\(item.name): \(text)")
      #expect(text.hasSuffix(#" here"}"#), "\(item.name): \(text)")
      #expect(
        Array(item.text.utf8).withUnsafeBufferPointer { SecretMasking.occurs(spellings, in: $0) }, "\(item.name)")
    }
  }

  @Test func eachEncodingIsMaskedWhereverTheReadsSplitIt() {
    var body: [UInt8] = Array(#"{"seen":[""#.utf8)
    var expected = body
    for item in Self.cases {
      body += Array(item.text.utf8) + Array(#"",""#.utf8)
      expected += item.expected + Array(#"",""#.utf8)
    }
    body += Array(#"end"]}"#.utf8)
    expected += Array(#"end"]}"#.utf8)
    #expect(Self.run(body, cuts: []) == expected)
    for first in stride(from: 0, through: body.count, by: 13) {
      for second in stride(from: first, through: body.count, by: 37) {
        #expect(Self.run(body, cuts: [first, second]) == expected, "cuts \(first) \(second)")
      }
    }
    #expect(Self.run(body, cuts: Array(1..<body.count)) == expected)
  }

  /// Each form split across two reads at every place, the split falling inside an escape
  /// or a reference too.
  @Test func eachEncodingSplitAtEveryByteIsMasked() {
    for item in Self.cases {
      let body = Array("x ".utf8) + Array(item.text.utf8) + Array(" y".utf8)
      let expected = Array("x ".utf8) + item.expected + Array(" y".utf8)
      for cut in 0...body.count {
        #expect(Self.run(body, cuts: [cut]) == expected, "\(item.name) cut at \(cut)")
      }
    }
  }

  @Test func lookAlikesAreLeftAlone() {
    let spellings = SecretSpellings(Self.secret)
    let other = Array("tok>SECRET?~7d3b91xa55".utf8)
    let bodies = [
      Self.base64(other), Self.hex(other, upper: false), String(Self.token.dropLast()),
      // A reference over the digit bound is not read as one; one to a code point beyond
      // ASCII is not a byte of the token.
      "&#00000000116;ok>SECRET?~7d3b91aa55", "&#372;ok>SECRET?~7d3b91aa55",
    ]
    for text in bodies {
      #expect(SecretMasking.masked([spellings], in: Array(text.utf8)) == nil, "\(text)")
      #expect(Self.run(Array(text.utf8), cuts: [3]) == Array(text.utf8), "\(text)")
    }
  }

  /// The forms: the value, hex, base64 and base64url (padded, unpadded, three alignments),
  /// no duplicates, longest first; short values have none, and short derived forms are not
  /// looked for. The held tail is the longest form (hex) with every byte escaped.
  @Test func formsAreMadeOnceAndBoundTheHeldTail() {
    let spellings = SecretSpellings(Self.secret)
    #expect(spellings.forms.first?.count == Self.secret.count * 2)
    #expect(spellings.forms.map(\.count) == spellings.forms.map(\.count).sorted(by: >))
    #expect(Set(spellings.forms).count == spellings.forms.count)
    #expect(spellings.forms.allSatisfy { form in form.allSatisfy { !(0x41...0x5A).contains($0) } })
    #expect(spellings.longestOccurrence == Self.secret.count * 2 * SecretMasking.maximumEscapeLength)
    #expect(!SecretSpellings(Array("abc".utf8)).isSearched)
    let short = SecretSpellings(Array("abcd".utf8))
    #expect(short.forms.allSatisfy { $0 == Array("abcd".utf8) || $0.count >= SecretSpellings.minimumFormLength })
    #expect("\(spellings)".contains("redacted") && !"\(spellings)".contains("SECRET"))
  }

  /// A token's spellings are made when its value is set and shared by every grant of it
  /// (and the published entry), not made per request; a new value gets new ones.
  @Test func aTokenValueGetsItsSpellingsOnce() {
    let t0 = TokenInstant(millisecondsSinceEpoch: 1_800_000_000_000)
    var lifecycle = TokenLifecycle(kind: .oauth2(refreshBefore: .seconds(60)))
    let start = lifecycle.start(restoring: nil, now: t0)
    guard case .startRefresh(let ticket)? = start.first(where: { if case .startRefresh = $0 { true } else { false } })
    else {
      Issue.record("no refresh started: \(start)")
      return
    }
    _ = lifecycle.refreshSucceeded(ticket, value: SecretValue(Self.token), expiresIn: .seconds(3600), now: t0)
    let first = lifecycle.usableGrant(at: t0)
    let second = lifecycle.usableGrant(at: t0 + .seconds(5))
    #expect(first != nil && first?.spellings === second?.spellings)
    #expect(first?.spellings.value == Self.secret)
    let entry = TokenValues.Entry(
      name: "api", index: 0, value: first?.bytes, serial: 1, state: .valid, expiresAt: nil, refreshable: true,
      rejectionsIgnoredUntil: nil, refreshSuccesses: 1, refreshFailures: 0, spellings: first?.spellings)
    #expect(entry.grant?.spellings === first?.spellings)

    let (_, refresh) = lifecycle.refreshNow(now: t0 + .seconds(10))
    guard case .startRefresh(let next)? = refresh.first(where: { if case .startRefresh = $0 { true } else { false } })
    else {
      Issue.record("no refresh started: \(refresh)")
      return
    }
    _ = lifecycle.refreshSucceeded(next, value: SecretValue("another-value-0123"), expiresIn: .seconds(3600), now: t0)
    let renewed = lifecycle.usableGrant(at: t0 + .seconds(11))
    #expect(renewed?.spellings !== first?.spellings)
    #expect(renewed?.spellings.value == Array("another-value-0123".utf8))
  }
}
