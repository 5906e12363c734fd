import Testing

@testable import GatehouseJSON

@Suite struct KeyPathTests {
  static let document = #"""
    {"data":{"items":[1,2,3],"user":{"name":"Ann"}},
     "users" : [ {"name":"a"} , {"name":"b\"c", "tags":[]} ],
     "0":"zero", "esc\u0061ped":true, "\u00e9t\u00e9":"summer", "\uD83D\uDE00":"smile",
     "dup":1, "dup":{"x":2}, "dat":"prefix", "datax":"longer", "a.b":"dotted",
     "nested":[[10,[20,21]],{"1":"one"}], "big":123456789012345678901234567890 }
    """#

  func value(_ path: String, in text: String = KeyPathTests.document) -> String? {
    let bytes = Array(text.utf8)
    #expect(JSONValidator.firstError(in: bytes) == nil)
    guard let keyPath = JSONKeyPath(path) ?? (path.isEmpty ? .root : nil) else {
      Issue.record("bad path \(path)")
      return nil
    }
    guard let range = JSONDocument.range(of: keyPath, in: bytes) else { return nil }
    return String(decoding: bytes[range], as: UTF8.self)
  }

  @Test func nestedMembers() {
    #expect(value("data.items") == "[1,2,3]")
    #expect(value("data.user") == #"{"name":"Ann"}"#)
    #expect(value("data.user.name") == #""Ann""#)
    #expect(value("big") == "123456789012345678901234567890")
  }

  @Test func arrayIndexes() {
    #expect(value("data.items.0") == "1")
    #expect(value("data.items.2") == "3")
    #expect(value("data.items.3") == nil)
    #expect(value("users.0.name") == #""a""#)
    #expect(value("users.1.name") == #""b\"c""#)
    #expect(value("users.1.tags") == "[]")
    #expect(value("users.1.tags.0") == nil)
    #expect(value("users.2") == nil)
    #expect(value("nested.0.1.1") == "21")
    #expect(value("nested.1.1") == #""one""#)  // "1" names a member on an object
    #expect(value("users.01") == nil)  // not a canonical index
    #expect(value("users.x") == nil)
    #expect(value("0.a", in: #" [ {"a" : 1 } ] "#) == "1")
  }

  @Test func numericSegmentOnObjectIsAKey() {
    #expect(value("0") == #""zero""#)
  }

  @Test func missingAndWrongType() {
    #expect(value("missing") == nil)
    #expect(value("data.missing") == nil)
    #expect(value("data.items.x") == nil)
    #expect(value("data.items.0.x") == nil)  // a number has no members
    #expect(value("data.user.name.first") == nil)  // nor does a string
    #expect(value("a.b") == nil)  // the path's dot always separates
    #expect(value("a", in: "[1]") == nil)
    #expect(value("0", in: "7") == nil)
  }

  @Test func keysAreComparedWhole() {
    #expect(value("dat") == #""prefix""#)
    #expect(value("datax") == #""longer""#)
    #expect(value("da") == nil)
  }

  @Test func escapedKeys() {
    #expect(value("escaped") == "true")
    #expect(value("été") == #""summer""#)
    #expect(value("😀") == #""smile""#)
    #expect(value("escape") == nil)
    #expect(value("escapedd") == nil)
  }

  /// Documented choice: the first member with the name is followed, without backtracking.
  @Test func duplicateKeysFirstWins() {
    #expect(value("dup") == "1")
    #expect(value("dup.x") == nil)
  }

  @Test func rootIsTheTrimmedDocument() {
    #expect(value("", in: "  [1, 2] \n") == "[1, 2]")
    #expect(value("", in: "\"s\"") == "\"s\"")
    #expect(value("", in: " -1.5e3 ") == "-1.5e3")
  }

  @Test func valueWithWhitespaceAround() {
    #expect(value("a", in: "{ \"a\" :\n  { \"b\" : [ 1 , 2 ] }  \n}") == #"{ "b" : [ 1 , 2 ] }"#)
    #expect(value("a.b.1", in: "{ \"a\" :\n  { \"b\" : [ 1 , 2 ] }  \n}") == "2")
    #expect(value("b", in: #"{"a":"x\\","b":null}"#) == "null")
    #expect(value("b", in: #"{"a":"{[\"","b":false}"#) == "false")
  }

  @Test func pathParsing() {
    #expect(JSONKeyPath("") == nil)
    #expect(JSONKeyPath("a..b") == nil)
    #expect(JSONKeyPath(".a") == nil)
    #expect(JSONKeyPath("a.") == nil)
    let path = JSONKeyPath("users.0.name.12.01")!
    #expect(path.segments.map(\.index) == [nil, 0, nil, 12, nil])
    #expect(path.description == "users.0.name.12.01")
    #expect(JSONKeyPath.root.segments.isEmpty)
  }

  /// A dot before a combining mark is one Character to Swift; the path still splits there.
  @Test func pathSplitsAtTheDotByteBeforeACombiningMark() {
    let path = JSONKeyPath("a.\u{0820}b")
    #expect(path?.segments.map(\.name) == [Array("a".utf8), Array("\u{0820}b".utf8)])
    #expect(value("a.\u{0820}b", in: "{\"a\":{\"\u{0820}b\":2}}") == "2")
    #expect(JSONKeyPath("a.\u{0301}") != nil)
    #expect(JSONKeyPath("a.\u{0301}")?.segments.count == 2)
  }
}

@Suite struct EnvelopeDetectionTests {
  @Test(arguments: [
    (#"{"code":0,"datas":null,"message":""}"#, true),
    (#"{"code":1,"message":"x"}"#, true),
    (#"{"datas":[1],"code":2}"#, true),
    (#"  { "code" : 0 , "message" : "" }  "#, true),
    (#"{"c\u006fde":0,"datas":1}"#, true),
    (#"{"other":{"code":1},"code":0,"datas":{}}"#, true),
    (#"{"code":0}"#, false),
    (#"{"message":"x","datas":1}"#, false),
    (#"{"code":0,"data":1}"#, false),
    (#"{"x":{"code":0,"datas":1}}"#, false),
    (#"[{"code":0,"datas":1}]"#, false),
    (#""code""#, false),
    ("{}", false),
    ("null", false),
  ])
  func detection(_ text: String, _ expected: Bool) {
    let bytes = Array(text.utf8)
    #expect(JSONValidator.firstError(in: bytes) == nil)
    #expect(JSONDocument.isEnvelope(bytes) == expected, "\(text)")
  }
}

@Suite struct ErrorMessageTests {
  @Test(arguments: [
    (#"{"message":"boom"}"#, "boom"),
    (#"{"error":"bad","message":"msg"}"#, "msg"),
    (#"{"detail":"d","error_description":"ed"}"#, "ed"),
    (#"{"detail":"only detail"}"#, "only detail"),
    (#"{"error":{"code":7,"message":"nested"}}"#, "nested"),
    (#"{"detail":"d","error":{"code":7,"message":"nested"}}"#, "nested"),
    (#"{"error":{"code":7},"detail":"d"}"#, "d"),
    (#"{"error":{"message":5},"detail":"d"}"#, "d"),
    (#"{"message":42,"error":"e"}"#, "e"),
    (#"{"message":"first","message":"second"}"#, "first"),
    (#"{"message":1,"message":"second"}"#, "second"),
    (#"{"message":"a\nb\u00e9\uD83D\uDE00\"q\"\\\/"}"#, "a\nbé😀\"q\"\\/"),
    (#"{"m\u0065ssage":"escaped key"}"#, "escaped key"),
    (#" { "status" : 400 , "error" : "Bad Request" } "#, "Bad Request"),
    (#"{"message":""}"#, ""),
  ])
  func extraction(_ text: String, _ expected: String) {
    let bytes = Array(text.utf8)
    #expect(JSONValidator.firstError(in: bytes) == nil)
    #expect(JSONDocument.errorMessage(bytes) == expected, "\(text)")
  }

  @Test(arguments: [
    #"{"message":null}"#, #"{"msg":"x"}"#, "{}", #"["message"]"#, #""message""#, #"{"error":["x"]}"#,
    #"{"a":{"message":"nested elsewhere"}}"#,
  ])
  func absent(_ text: String) {
    #expect(JSONDocument.errorMessage(Array(text.utf8)) == nil, "\(text)")
  }

  @Test func loneSurrogateBecomesReplacementCharacter() {
    #expect(JSONDocument.errorMessage(Array(#"{"message":"a\uD800b"}"#.utf8)) == "a\u{FFFD}b")
  }
}
