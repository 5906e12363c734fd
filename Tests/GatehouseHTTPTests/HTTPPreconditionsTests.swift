import Testing

@testable import GatehouseHTTP

/// Conditional requests (RFC 9110 §13.2.2) on answers the gateway sends itself.
@Suite struct HTTPPreconditionsTests {
  static let etag = Array(#""abc""#.utf8)
  static let lastModified: Int64 = 784_111_777

  static func headers(_ fields: [(String, String)]) -> HTTPHeaders { HTTPHeaders(fields) }

  static func evaluate(_ fields: [(String, String)], etag: [UInt8]? = etag, lastModified: Int64? = lastModified)
    -> HTTPPreconditions.Outcome
  {
    HTTPPreconditions.evaluate(headers(fields), etag: etag, lastModified: lastModified)
  }

  @Test func ifNoneMatchComparesWeaklyAndTakesStarAndLists() {
    #expect(Self.evaluate([("If-None-Match", #""abc""#)]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", #"W/"abc""#)]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", "*")]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", #""x", W/"y" ,"abc""#)]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", #""x""#), ("If-None-Match", #""abc""#)]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", #""x", "y""#)]) == .proceed)
    #expect(Self.evaluate([("If-None-Match", #""a,b""#)], etag: Array(#""a,b""#.utf8)) == .notModified)
  }

  /// If-None-Match decides alone: a date that would say "not modified" is not looked at.
  @Test func ifNoneMatchComesBeforeIfModifiedSince() {
    let date = "Sun, 06 Nov 1994 08:49:37 GMT"
    #expect(Self.evaluate([("If-Modified-Since", date)]) == .notModified)
    #expect(Self.evaluate([("If-None-Match", #""other""#), ("If-Modified-Since", date)]) == .proceed)
    #expect(Self.evaluate([("If-Modified-Since", "Sun, 06 Nov 1994 08:49:36 GMT")]) == .proceed)
    // Without a modification date there is nothing to compare.
    #expect(Self.evaluate([("If-Modified-Since", date)], lastModified: nil) == .proceed)
  }

  @Test func ifMatchComparesStronglyAndFailsThePrecondition() {
    #expect(Self.evaluate([("If-Match", #""abc""#)]) == .proceed)
    #expect(Self.evaluate([("If-Match", #"W/"abc""#)]) == .preconditionFailed)
    #expect(Self.evaluate([("If-Match", #""x""#)]) == .preconditionFailed)
    #expect(Self.evaluate([("If-Match", "*")]) == .proceed)
    #expect(Self.evaluate([("If-Unmodified-Since", "Sun, 06 Nov 1994 08:49:36 GMT")]) == .preconditionFailed)
    #expect(Self.evaluate([("If-Unmodified-Since", "Sun, 06 Nov 1994 08:49:37 GMT")]) == .proceed)
  }

  @Test func malformedFieldsAreIgnored() {
    #expect(Self.evaluate([("If-None-Match", "abc")]) == .proceed)
    #expect(Self.evaluate([("If-None-Match", #""abc"x"#)]) == .proceed)
    #expect(Self.evaluate([("If-None-Match", #""ab"c""#)]) == .proceed)
    #expect(Self.evaluate([("If-None-Match", "")]) == .proceed)
    #expect(Self.evaluate([("If-Match", "nonsense")]) == .proceed)
    #expect(Self.evaluate([("If-Modified-Since", "yesterday")]) == .proceed)
    let date = "Sun, 06 Nov 1994 08:49:37 GMT"
    #expect(Self.evaluate([("If-Modified-Since", date), ("If-Modified-Since", date)]) == .proceed)
    #expect(!HTTPPreconditions.isConditional(Self.headers([("Range", "bytes=0-1"), ("Accept", "*/*")])))
    #expect(HTTPPreconditions.isConditional(Self.headers([("if-none-match", "*")])))
  }

  // MARK: Against a reference model

  /// One conditional field as the generator describes it.
  enum Field {
    case tags([(weak: Bool, opaque: String)], lines: Int)
    case any
    case malformed(String)
    case date(String, seconds: Int64?, lines: Int)
  }

  /// Dates with their instants: each form, and a second either side of the example.
  static let dates: [(text: String, seconds: Int64?)] = [
    ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777), ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777),
    ("Sun Nov  6 08:49:37 1994", 784_111_777), ("Sun, 06 Nov 1994 08:49:36 GMT", 784_111_776),
    ("Sun, 06 Nov 1994 08:49:38 GMT", 784_111_778), ("not a date", nil), ("Sun, 06 Nov 1994", nil),
  ]
  static let opaques = [#""abc""#, #""abd""#, #""""#, #""a,b""#, #""x/y""#]
  static let garbage = ["abc", #""abc"x"#, "W/abc", #"W/"abc"#, ",,", "**", #""a" "b""#]

  static func randomTagField(_ random: inout SplitMix64) -> Field? {
    switch Int.random(in: 0..<6, using: &random) {
    case 0, 1: return nil
    case 2: return .any
    case 3: return .malformed(garbage.randomElement(using: &random)!)
    default:
      let count = Int.random(in: 1...3, using: &random)
      let tags = (0..<count).map { _ in
        (weak: Bool.random(using: &random), opaque: opaques.randomElement(using: &random)!)
      }
      return .tags(tags, lines: Int.random(in: 1...min(2, count), using: &random))
    }
  }

  static func randomDateField(_ random: inout SplitMix64) -> Field? {
    guard Bool.random(using: &random) else { return nil }
    let date = dates.randomElement(using: &random)!
    return .date(date.text, seconds: date.seconds, lines: Int.random(in: 0..<5, using: &random) == 0 ? 2 : 1)
  }

  /// The field's lines: a list split over `lines` lines with varied whitespace.
  static func lines(_ name: String, _ field: Field, _ random: inout SplitMix64) -> [(String, String)] {
    switch field {
    case .any: return [(name, "*")]
    case .malformed(let text): return [(name, text)]
    case .date(let text, _, let lines): return Array(repeating: (name, text), count: lines)
    case .tags(let tags, let lines):
      let rendered = tags.map { ($0.weak ? "W/" : "") + $0.opaque }
      let split = rendered.count - lines + 1
      let separators = [",", ", ", " ,", " , "]
      var out = [(name, rendered[..<split].joined(separator: separators.randomElement(using: &random)!))]
      for tag in rendered[split...] { out.append((name, tag)) }
      return out
    }
  }

  /// RFC 9110 §13.2.2 from the description, for a representation that exists with `etag`
  /// and `lastModified`. A field that does not parse is ignored; dates need exactly one line
  /// and a modification date to compare with.
  static func model(
    ifMatch: Field?, ifUnmodifiedSince: Field?, ifNoneMatch: Field?, ifModifiedSince: Field?, etag: String?,
    lastModified: Int64?
  ) -> HTTPPreconditions.Outcome {
    func validDate(_ field: Field?) -> Int64? {
      guard case .date(_, let seconds?, 1) = field else { return nil }
      return seconds
    }
    switch ifMatch {
    case .any?: break
    case .tags(let tags, _)?:
      if !tags.contains(where: { !$0.weak && $0.opaque == etag }) { return .preconditionFailed }
    default:
      if let date = validDate(ifUnmodifiedSince), let lastModified, lastModified > date { return .preconditionFailed }
    }
    switch ifNoneMatch {
    case .any?: return .notModified
    case .tags(let tags, _)?: return tags.contains(where: { $0.opaque == etag }) ? .notModified : .proceed
    default:
      if let date = validDate(ifModifiedSince), let lastModified, lastModified <= date { return .notModified }
      return .proceed
    }
  }

  /// Random combinations of the four fields (absent, `*`, lists over one or two lines,
  /// malformed values, dates in each form or invalid, repeated), against the model.
  @Test func agreesWithTheReferenceModel() {
    var random = SplitMix64(seed: 0x5052_4543_4F4E_4453)
    var seen: [HTTPPreconditions.Outcome: Int] = [:]
    for _ in 0..<20_000 {
      let ifMatch = Self.randomTagField(&random)
      let ifNoneMatch = Self.randomTagField(&random)
      let ifUnmodifiedSince = Self.randomDateField(&random)
      let ifModifiedSince = Self.randomDateField(&random)
      let etag = Bool.random(using: &random) ? Self.opaques.randomElement(using: &random)! : nil
      let lastModified: Int64? = [nil, 784_111_776, 784_111_777, 784_111_778].randomElement(using: &random)!
      var fields: [(String, String)] = [("Accept", "application/json")]
      if let ifMatch { fields += Self.lines("If-Match", ifMatch, &random) }
      if let ifNoneMatch { fields += Self.lines("if-none-match", ifNoneMatch, &random) }
      if let ifUnmodifiedSince { fields += Self.lines("If-Unmodified-Since", ifUnmodifiedSince, &random) }
      if let ifModifiedSince { fields += Self.lines("IF-MODIFIED-SINCE", ifModifiedSince, &random) }
      fields.shuffle(using: &random)
      let expected = Self.model(
        ifMatch: ifMatch, ifUnmodifiedSince: ifUnmodifiedSince, ifNoneMatch: ifNoneMatch,
        ifModifiedSince: ifModifiedSince, etag: etag, lastModified: lastModified)
      let outcome = HTTPPreconditions.evaluate(
        Self.headers(fields), etag: etag.map { Array($0.utf8) }, lastModified: lastModified)
      #expect(outcome == expected, "\(fields) etag \(etag ?? "none") last-modified \(lastModified ?? -1)")
      seen[outcome, default: 0] += 1
      if outcome != expected { return }
    }
    // Each outcome came up often: the model is exercised, not just its default.
    #expect(seen.values.allSatisfy { $0 > 1000 } && seen.count == 3, "\(seen)")
  }

  @Test func entityTagsAreReadWithTheirWeakness() {
    #expect(EntityTag(Array(#"W/"x""#.utf8)) == EntityTag(isWeak: true, opaque: Array(#""x""#.utf8)))
    #expect(EntityTag(Array(#""x""#.utf8))?.isWeak == false)
    #expect(EntityTag(Array(#""x"#.utf8)) == nil)
    #expect(EntityTag(Array("\"a\u{7F}\"".utf8)) == nil)
    #expect(EntityTagList(Array(" * ".utf8)) == .any)
    #expect(EntityTagList(Array(#""a", *"#.utf8)) == nil)
  }
}
