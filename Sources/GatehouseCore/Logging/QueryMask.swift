import GatehouseHTTP
import GatehouseJSON

/// Masks the values of sensitive query parameters in access lines (`log.mask_query`):
/// `?user=7&token=abc` is logged as `user=7&token=***`. Query strings carry credentials
/// (OAuth codes, signed-URL signatures, API keys) that must not land in log files.
///
/// Names compare case-insensitively after percent-decoding, so `%74oken` and `TOKEN` are
/// masked like `token`: a backend decodes them to the same parameter.
public struct QueryMask: Sendable, Equatable {
  /// The names masked, lowercase ASCII.
  let names: [[UInt8]]

  public init(names: [String]) {
    self.names = names.map { Array($0.lowercased().utf8) }
  }

  /// Appends `query` as a JSON string, each masked parameter's value replaced by `***`
  /// (its name is kept: which parameter was sent is useful, its value is not).
  public func appendJSONString(_ query: ArraySlice<UInt8>, to out: inout [UInt8]) {
    guard !names.isEmpty else {
      JSONText.appendString(bytes: query, to: &out)
      return
    }
    out.append(0x22)
    var start = query.startIndex
    while start <= query.endIndex {
      let end = query[start...].firstIndex(of: 0x26) ?? query.endIndex
      let pair = query[start..<end]
      if let equals = pair.firstIndex(of: 0x3D), isMasked(name: pair[..<equals]) {
        JSONText.appendStringContent(bytes: pair[...equals], to: &out)
        if equals + 1 < end { out.append(contentsOf: Self.mask) }
      } else {
        JSONText.appendStringContent(bytes: pair, to: &out)
      }
      guard end < query.endIndex else { break }
      out.append(0x26)
      start = end + 1
    }
    out.append(0x22)
  }

  static let mask: [UInt8] = Array("***".utf8)

  /// Whether the (raw, maybe percent-encoded) parameter name is one of `names`. Compared
  /// as it is decoded, without a copy: this runs for every parameter of every logged query.
  func isMasked(name raw: ArraySlice<UInt8>) -> Bool {
    for name in names where Self.decodedEquals(raw, name) { return true }
    return false
  }

  /// `raw` percent- and `+`-decoded, ASCII letters lowercased, equals `name`.
  static func decodedEquals(_ raw: ArraySlice<UInt8>, _ name: [UInt8]) -> Bool {
    var index = raw.startIndex
    var position = 0
    while index < raw.endIndex {
      var byte = raw[index]
      if byte == 0x25, index + 2 < raw.endIndex, let high = hexValue(raw[index + 1]), let low = hexValue(raw[index + 2])
      {
        byte = high << 4 | low
        index += 2
      } else if byte == 0x2B {
        byte = 0x20
      }
      if byte >= 0x41 && byte <= 0x5A { byte |= 0x20 }
      guard position < name.count, byte == name[position] else { return false }
      position += 1
      index += 1
    }
    return position == name.count
  }

  static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case 0x30...0x39: return byte - 0x30
    case 0x41...0x46: return byte - 0x41 + 10
    case 0x61...0x66: return byte - 0x61 + 10
    default: return nil
    }
  }
}
