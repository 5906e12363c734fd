#if canImport(Glibc)
  import Glibc
#endif

/// RFC 3339 UTC timestamps without Foundation (`2026-11-29T21:04:05.123Z`).
public enum RFC3339 {
  /// Wall-clock time as (seconds, milliseconds) since the Unix epoch.
  public static func now() -> (seconds: Int64, milliseconds: Int) {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return (Int64(ts.tv_sec), Int(ts.tv_nsec / 1_000_000))
  }

  /// Wall-clock milliseconds since the Unix epoch (the store's time unit).
  public static func nowMilliseconds() -> Int64 {
    let now = now()
    return now.seconds * 1000 + Int64(now.milliseconds)
  }

  /// Appends the timestamp, with milliseconds when `milliseconds` is given.
  public static func append(seconds: Int64, milliseconds: Int? = nil, to out: inout [UInt8]) {
    let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
    let secondOfDay = Int(seconds - days * 86_400)
    let (year, month, day) = civilDate(daysSinceEpoch: days)
    appendDigits(year, 4, &out)
    out.append(0x2D)
    appendDigits(month, 2, &out)
    out.append(0x2D)
    appendDigits(day, 2, &out)
    out.append(0x54)
    appendDigits(secondOfDay / 3600, 2, &out)
    out.append(0x3A)
    appendDigits(secondOfDay / 60 % 60, 2, &out)
    out.append(0x3A)
    appendDigits(secondOfDay % 60, 2, &out)
    if let milliseconds {
      out.append(0x2E)
      appendDigits(milliseconds, 3, &out)
    }
    out.append(0x5A)
  }

  public static func string(seconds: Int64) -> String {
    var out: [UInt8] = []
    append(seconds: seconds, to: &out)
    return String(decoding: out, as: UTF8.self)
  }

  /// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
  static func civilDate(daysSinceEpoch: Int64) -> (year: Int, month: Int, day: Int) {
    let z = daysSinceEpoch + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthIndex = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
    let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    return (Int(year), Int(month), Int(day))
  }

  static func appendDigits(_ value: Int, _ width: Int, _ out: inout [UInt8]) {
    var divisor = 1
    for _ in 1..<width { divisor *= 10 }
    var rest = value
    while divisor > 0 {
      out.append(0x30 &+ UInt8(rest / divisor % 10))
      rest %= divisor
      divisor /= 10
    }
  }
}
