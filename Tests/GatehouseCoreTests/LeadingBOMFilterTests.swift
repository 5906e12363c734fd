import Testing

@testable import GatehouseCore

/// A byte order mark at the start of a streamed body is left out however the reads split
/// it, and a body that only starts like one loses nothing.
@Suite struct LeadingBOMFilterTests {
  static func run(_ body: [UInt8], cuts: [Int]) -> [UInt8] {
    var filter = LeadingBOMFilter()
    var out: [UInt8] = []
    var start = 0
    for cut in cuts + [body.count] where cut >= start {
      let piece = Array(body[start..<cut])
      out += piece.withUnsafeBytes { filter.filter($0) } ?? piece
      start = cut
    }
    return out + filter.finish()
  }

  @Test func theMarkIsLeftOutWhereverTheReadsSplitIt() {
    let json = Array(#"{"a":1}"#.utf8)
    let marked: [UInt8] = [0xEF, 0xBB, 0xBF] + json
    for first in 0...4 {
      for second in first...5 {
        #expect(Self.run(marked, cuts: [first, second]) == json, "cuts \(first) \(second)")
        #expect(Self.run(json, cuts: [first, second]) == json, "cuts \(first) \(second)")
      }
    }
  }

  @Test func aBodyThatOnlyStartsLikeTheMarkKeepsEveryByte() {
    for body: [UInt8] in [[0xEF], [0xEF, 0xBB], [0xEF, 0xBB, 0x41], [0xEF, 0x41, 0x42], [0x20, 0xEF, 0xBB, 0xBF]] {
      for cut in 0...body.count {
        #expect(Self.run(body, cuts: [cut]) == body, "\(body) cut \(cut)")
      }
    }
  }
}
