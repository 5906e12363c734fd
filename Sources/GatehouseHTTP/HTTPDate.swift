/// HTTP dates (RFC 9110 §5.6.7): read in all three forms a recipient must accept
/// (IMF-fixdate, the obsolete RFC 850 and asctime forms), written as IMF-fixdate. Seconds
/// since the Unix epoch, UTC; no calendar library, byte by byte.
public enum HTTPDate {
  /// The seconds `value` names, or nil when it is no HTTP date.
  public static func parse(_ value: some Collection<UInt8>) -> Int64? {
    var bytes = Array(value)
    // Surrounding whitespace is the field's, not the date's.
    while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
    var start = 0
    while start < bytes.count, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
    let text = bytes[start...]
    guard let comma = text.firstIndex(of: 0x2C) else { return asctime(Array(text)) }
    let rest = Array(text[(comma + 1)...])
    // "Sun, 06 Nov 1994 08:49:37 GMT" (the day name is three letters) or
    // "Sunday, 06-Nov-94 08:49:37 GMT".
    guard let day = dayIndex(Array(text[..<comma])) else { return nil }
    let parsed = comma - start == 3 ? fixdate(rest) : rfc850(rest)
    guard let parsed else { return nil }
    // The day name is redundant; one that disagrees with the date makes it no date.
    guard weekday(ofDays: floorDivide(parsed, 86_400)) == day.index, comma - start == day.length else { return nil }
    return parsed
  }

  /// `seconds` as an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
  public static func format(_ seconds: Int64) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(29)
    let days = floorDivide(seconds, 86_400)
    let secondOfDay = seconds - days * 86_400
    let (year, month, day) = civil(fromDays: days)
    out.append(contentsOf: shortDayNames[weekday(ofDays: days)])
    out.append(contentsOf: ", ".utf8)
    appendTwoDigits(day, to: &out)
    out.append(0x20)
    out.append(contentsOf: monthNames[Int(month) - 1])
    out.append(0x20)
    let yearText = String(year)
    out.append(contentsOf: String(repeating: "0", count: max(0, 4 - yearText.count)).utf8)
    out.append(contentsOf: yearText.utf8)
    out.append(0x20)
    appendTwoDigits(secondOfDay / 3600, to: &out)
    out.append(0x3A)
    appendTwoDigits(secondOfDay / 60 % 60, to: &out)
    out.append(0x3A)
    appendTwoDigits(secondOfDay % 60, to: &out)
    out.append(contentsOf: " GMT".utf8)
    return out
  }

  // MARK: The three forms

  /// `06 Nov 1994 08:49:37 GMT`
  private static func fixdate(_ bytes: [UInt8]) -> Int64? {
    // A space, then exactly "dd Mmm yyyy hh:mm:ss GMT".
    guard bytes.count == 25, bytes[0] == 0x20, bytes[3] == 0x20, bytes[7] == 0x20, bytes[12] == 0x20,
      bytes[21] == 0x20, Array(bytes[22...]) == Array("GMT".utf8)
    else { return nil }
    guard let day = digits(bytes, 1, 2), let month = monthIndex(bytes[4..<7]), let year = digits(bytes, 8, 4),
      let time = timeOfDay(bytes, 13)
    else { return nil }
    return seconds(year: year, month: month, day: day, time: time)
  }

  /// `06-Nov-94 08:49:37 GMT`: a two-digit year that looks more than 50 years into the
  /// future is in the past century (RFC 9110 §5.6.7).
  private static func rfc850(_ bytes: [UInt8]) -> Int64? {
    guard bytes.count == 23, bytes[0] == 0x20, bytes[3] == 0x2D, bytes[7] == 0x2D, bytes[10] == 0x20,
      bytes[19] == 0x20, Array(bytes[20...]) == Array("GMT".utf8)
    else { return nil }
    guard let day = digits(bytes, 1, 2), let month = monthIndex(bytes[4..<7]), let shortYear = digits(bytes, 8, 2),
      let time = timeOfDay(bytes, 11)
    else { return nil }
    // Against the century of today's date would make a parse depend on the clock; a date
    // this form can still carry is read as 1950...2049 (as most HTTP libraries do).
    let year = shortYear < 50 ? 2000 + shortYear : 1900 + shortYear
    return seconds(year: year, month: month, day: day, time: time)
  }

  /// `Sun Nov  6 08:49:37 1994`
  private static func asctime(_ bytes: [UInt8]) -> Int64? {
    guard bytes.count == 24, bytes[3] == 0x20, bytes[7] == 0x20, bytes[10] == 0x20, bytes[19] == 0x20,
      let day = dayIndex(Array(bytes[0..<3])), day.length == 3
    else { return nil }
    guard let month = monthIndex(bytes[4..<7]), let time = timeOfDay(bytes, 11), let year = digits(bytes, 20, 4)
    else { return nil }
    let dayOfMonth: Int64
    if bytes[8] == 0x20, let single = digits(bytes, 9, 1) {
      dayOfMonth = single
    } else if let double = digits(bytes, 8, 2) {
      dayOfMonth = double
    } else {
      return nil
    }
    guard let parsed = seconds(year: year, month: month, day: dayOfMonth, time: time),
      weekday(ofDays: floorDivide(parsed, 86_400)) == day.index
    else { return nil }
    return parsed
  }

  // MARK: Pieces

  private static let shortDayNames: [[UInt8]] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"].map {
    Array($0.utf8)
  }
  private static let longDayNames: [[UInt8]] = [
    "Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday",
  ].map { Array($0.utf8) }
  private static let monthNames: [[UInt8]] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
  ].map { Array($0.utf8) }

  /// The weekday of a day name (0 is Thursday, the weekday of 1970-01-01) and its length.
  /// Names are case-sensitive, as the grammar spells them.
  private static func dayIndex(_ name: [UInt8]) -> (index: Int, length: Int)? {
    if let index = shortDayNames.firstIndex(of: name) { return (index, 3) }
    if let index = longDayNames.firstIndex(of: name) { return (index, name.count) }
    return nil
  }

  private static func monthIndex(_ name: ArraySlice<UInt8>) -> Int64? {
    monthNames.firstIndex { $0.elementsEqual(name) }.map { Int64($0 + 1) }
  }

  private static func digits(_ bytes: [UInt8], _ start: Int, _ count: Int) -> Int64? {
    var value: Int64 = 0
    for index in start..<(start + count) {
      let digit = bytes[index] &- 0x30
      guard digit < 10 else { return nil }
      value = value * 10 + Int64(digit)
    }
    return value
  }

  /// `hh:mm:ss` at `start`; a leap second (60) is allowed by the grammar and read as 59.
  private static func timeOfDay(_ bytes: [UInt8], _ start: Int) -> Int64? {
    guard bytes[start + 2] == 0x3A, bytes[start + 5] == 0x3A, let hour = digits(bytes, start, 2),
      let minute = digits(bytes, start + 3, 2), let second = digits(bytes, start + 6, 2), hour < 24, minute < 60,
      second <= 60
    else { return nil }
    return hour * 3600 + minute * 60 + min(second, 59)
  }

  private static func seconds(year: Int64, month: Int64, day: Int64, time: Int64) -> Int64? {
    guard year >= 1, day >= 1, day <= daysIn(month: month, year: year) else { return nil }
    return days(fromCivil: year, month, day) * 86_400 + time
  }

  private static func daysIn(month: Int64, year: Int64) -> Int64 {
    switch month {
    case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
    case 4, 6, 9, 11: 30
    default: 31
    }
  }

  /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
  private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
    let y = month <= 2 ? year - 1 : year
    let era = floorDivide(y, 400)
    let yearOfEra = y - era * 400
    let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
    let z = days + 719_468
    let era = floorDivide(z, 146_097)
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthPart = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthPart + 2) / 5 + 1
    let month = monthPart < 10 ? monthPart + 3 : monthPart - 9
    return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
  }

  private static func weekday(ofDays days: Int64) -> Int {
    Int(days - floorDivide(days, 7) * 7)
  }

  private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
    value >= 0 ? value / divisor : -((-value + divisor - 1) / divisor)
  }

  private static func appendTwoDigits(_ value: Int64, to out: inout [UInt8]) {
    out.append(0x30 + UInt8(value / 10 % 10))
    out.append(0x30 + UInt8(value % 10))
  }
}
