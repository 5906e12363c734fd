import Foundation
import Testing

@testable import GatehouseHTTP

/// HTTP dates (RFC 9110 §5.6.7): the three forms a recipient must read, IMF-fixdate written.
@Suite struct HTTPDateTests {
  /// RFC 9110's example instant, in each form.
  static let example: Int64 = 784_111_777

  @Test func readsTheThreeFormsOfTheRFCsExample() {
    #expect(HTTPDate.parse(Array("Sun, 06 Nov 1994 08:49:37 GMT".utf8)) == Self.example)
    #expect(HTTPDate.parse(Array("Sunday, 06-Nov-94 08:49:37 GMT".utf8)) == Self.example)
    #expect(HTTPDate.parse(Array("Sun Nov  6 08:49:37 1994".utf8)) == Self.example)
    #expect(HTTPDate.parse(Array("  Sun, 06 Nov 1994 08:49:37 GMT \t".utf8)) == Self.example)
  }

  @Test(arguments: [
    "", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC", "Mon, 06 Nov 1994 08:49:37 GMT",
    "sun, 06 Nov 1994 08:49:37 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT x",
    "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 06 08:49:37 1994 GMT", "1994-11-06T08:49:37Z", "784111777",
    "Thu, 29 Feb 2001 00:00:00 GMT",
  ])
  func refusesWhatIsNoDate(text: String) {
    #expect(HTTPDate.parse(Array(text.utf8)) == nil, "\(text)")
  }

  @Test func writesIMFFixdate() {
    #expect(String(decoding: HTTPDate.format(Self.example), as: UTF8.self) == "Sun, 06 Nov 1994 08:49:37 GMT")
    #expect(String(decoding: HTTPDate.format(0), as: UTF8.self) == "Thu, 01 Jan 1970 00:00:00 GMT")
    #expect(String(decoding: HTTPDate.format(951_782_400), as: UTF8.self) == "Tue, 29 Feb 2000 00:00:00 GMT")
  }

  /// Against Foundation's calendar, for instants from 1970 to 2100: what is written is what
  /// Foundation writes, and reads back as the same instant in all three forms.
  @Test func agreesWithFoundationAndReadsBackWhatItWrites() throws {
    let fixdate = DateFormatter()
    fixdate.locale = Locale(identifier: "en_US_POSIX")
    fixdate.timeZone = TimeZone(identifier: "UTC")
    fixdate.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    let rfc850 = DateFormatter()
    rfc850.locale = fixdate.locale
    rfc850.timeZone = fixdate.timeZone
    rfc850.dateFormat = "EEEE, dd-MMM-yy HH:mm:ss 'GMT'"
    let asctime = DateFormatter()
    asctime.locale = fixdate.locale
    asctime.timeZone = fixdate.timeZone
    asctime.dateFormat = "EEE MMM d HH:mm:ss yyyy"
    var random = SplitMix64(seed: 0x4854_5450_4441_5445)
    for _ in 0..<2000 {
      let seconds = Int64.random(in: 0..<4_102_444_800, using: &random)
      let date = Date(timeIntervalSince1970: TimeInterval(seconds))
      let written = String(decoding: HTTPDate.format(seconds), as: UTF8.self)
      #expect(written == fixdate.string(from: date))
      #expect(HTTPDate.parse(Array(written.utf8)) == seconds)
      var asc = asctime.string(from: date)
      // asctime pads a one-digit day with a space: "Nov  6".
      if let range = asc.range(of: #" \d "#, options: .regularExpression) {
        asc.replaceSubrange(range, with: "  " + asc[range].trimmingCharacters(in: .whitespaces) + " ")
      }
      #expect(HTTPDate.parse(Array(asc.utf8)) == seconds, "\(asc)")
      // Two-digit years name 1950...2049.
      if (631_152_000..<2_524_608_000).contains(seconds) {
        #expect(HTTPDate.parse(Array(rfc850.string(from: date).utf8)) == seconds)
      }
    }
  }
}
