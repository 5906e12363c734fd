import GatehouseHTTP
import Testing

/// A parse result with body pieces joined, so parses of the same bytes in different pieces
/// compare equal.
enum Parsed: Equatable, CustomStringConvertible {
  case request(HTTPRequestHead)
  case response(HTTPResponseHead)
  case body([UInt8])
  case end(HTTPHeaders?)

  var description: String {
    switch self {
    case .request(let head): return "request(\(head.method) \(head.targetString) \(head.bodyFraming))"
    case .response(let head): return "response(\(head.status) \(head.bodyFraming))"
    case .body(let bytes): return "body(\(String(decoding: bytes, as: UTF8.self)))"
    case .end(let trailers): return "end(\(trailers.map { "\($0.pairs)" } ?? "nil"))"
    }
  }
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Feeds `pieces` one after another into a request parser and collects normalized events.
func parseRequests(pieces: [[UInt8]], limits: HTTPLimits = HTTPLimits()) throws(HTTPParseError) -> [Parsed] {
  var parser = HTTPRequestParser(limits: limits)
  var out: [Parsed] = []
  for piece in pieces {
    for event in try parser.parseAll(piece) {
      switch event {
      case .head(let head): out.append(.request(head))
      case .body(let range): appendBody(Array(piece[range]), to: &out)
      case .end(let trailers): out.append(.end(trailers))
      }
    }
  }
  return out
}

func parseResponses(
  pieces: [[UInt8]], requestWasHEAD: Bool = false, atEOF: Bool = false, limits: HTTPLimits = HTTPLimits()
) throws(HTTPParseError) -> [Parsed] {
  var parser = HTTPResponseParser(limits: limits)
  parser.requestWasHEAD = requestWasHEAD
  var out: [Parsed] = []
  for (index, piece) in pieces.enumerated() {
    for event in try parser.parseAll(piece, atEOF: atEOF && index == pieces.count - 1) {
      switch event {
      case .head(let head): out.append(.response(head))
      case .body(let range): appendBody(Array(piece[range]), to: &out)
      case .end(let trailers): out.append(.end(trailers))
      }
    }
  }
  return out
}

private func appendBody(_ piece: [UInt8], to out: inout [Parsed]) {
  if case .body(let previous)? = out.last {
    out[out.count - 1] = .body(previous + piece)
  } else {
    out.append(.body(piece))
  }
}

func parseRequests(_ text: String, limits: HTTPLimits = HTTPLimits()) throws(HTTPParseError) -> [Parsed] {
  try parseRequests(pieces: [bytes(text)], limits: limits)
}

/// The error a request is refused with, or nil if it parsed.
func requestError(_ text: String, limits: HTTPLimits = HTTPLimits()) -> HTTPParseError? {
  requestError(bytes(text), limits: limits)
}

func requestError(_ raw: [UInt8], limits: HTTPLimits = HTTPLimits()) -> HTTPParseError? {
  do {
    _ = try parseRequests(pieces: [raw], limits: limits)
    return nil
  } catch {
    return error
  }
}

func responseError(_ text: String, requestWasHEAD: Bool = false) -> HTTPParseError? {
  do {
    _ = try parseResponses(pieces: [bytes(text)], requestWasHEAD: requestWasHEAD)
    return nil
  } catch {
    return error
  }
}

extension Parsed {
  var requestHead: HTTPRequestHead? {
    if case .request(let head) = self { return head }
    return nil
  }
  var responseHead: HTTPResponseHead? {
    if case .response(let head) = self { return head }
    return nil
  }
}
