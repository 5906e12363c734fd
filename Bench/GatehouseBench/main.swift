import GatehouseHTTP

#if canImport(Glibc)
  import Glibc
#endif

/// Micro-benchmarks for the hot paths. Run with `swift run -c release GatehouseBench [name]`.
/// Each case runs for a fixed wall time and reports operations/s and MB/s on one core.

func now() -> Double {
  var ts = timespec()
  clock_gettime(CLOCK_MONOTONIC, &ts)
  return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Runs `body` in batches until `seconds` have passed; returns operations per second.
func measure(seconds: Double = 2, batch: Int = 10_000, _ body: () -> Int) -> (opsPerSecond: Double, sink: Int) {
  var sink = 0
  for _ in 0..<batch { sink &+= body() }  // warm-up
  let start = now()
  var operations = 0
  var elapsed = 0.0
  repeat {
    for _ in 0..<batch { sink &+= body() }
    operations += batch
    elapsed = now() - start
  } while elapsed < seconds
  return (Double(operations) / elapsed, sink)
}

func report(_ name: String, bytesPerOp: Int, _ result: (opsPerSecond: Double, sink: Int)) {
  let mbps = result.opsPerSecond * Double(bytesPerOp) / 1_000_000
  let ops = Int(result.opsPerSecond)
  print("\(name): \(ops) ops/s, \(Int(mbps)) MB/s, \(bytesPerOp) bytes/op (check \(result.sink & 0xFF))")
}

let requestHead = Array(
  ("GET /api/v1/users/12345/orders?status=open&limit=20 HTTP/1.1\r\n"
    + "Host: api.example.com\r\n"
    + "User-Agent: Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15\r\n"
    + "Accept: application/json, text/plain, */*\r\n"
    + "Accept-Language: en-US,en;q=0.9\r\n"
    + "Accept-Encoding: gzip, deflate, br\r\n"
    + "X-Request-Id: 6f1c2a8e-9b7d-4e21-8a3f-2c5d7e9b1a40\r\n"
    + "Cookie: session=abcdef0123456789; theme=dark\r\n"
    + "Connection: keep-alive\r\n\r\n").utf8)

let responseHead = Array(
  ("HTTP/1.1 200 OK\r\n"
    + "Server: nginx/1.22.1\r\n"
    + "Date: Sun, 29 Nov 2026 21:00:00 GMT\r\n"
    + "Content-Type: application/json; charset=utf-8\r\n"
    + "Content-Length: 1234\r\n"
    + "Connection: keep-alive\r\n"
    + "Cache-Control: max-age=0, private, must-revalidate\r\n"
    + "ETag: W/\"5f3c-1a2b3c4d\"\r\n"
    + "X-Request-Id: 6f1c2a8e-9b7d-4e21-8a3f-2c5d7e9b1a40\r\n\r\n").utf8)

let chunkedBody = Array(
  (String(repeating: "400\r\n" + String(repeating: "x", count: 1024) + "\r\n", count: 16) + "0\r\n\r\n").utf8)

func benchRequestHead() {
  var parser = HTTPRequestParser()
  let result = requestHead.withUnsafeBytes { raw in
    measure {
      // A fresh head each time: the full cost of a request head, as a server pays it.
      guard case (.head(let head)?, let consumed) = try! parser.parse(raw) else { fatalError("no head") }
      _ = try! parser.parse(UnsafeRawBufferPointer(rebasing: raw[consumed...]))
      return head.headers.count
    }
  }
  report("request-head", bytesPerOp: requestHead.count, result)
}

func benchResponseHead() {
  var parser = HTTPResponseParser()
  var framed = responseHead
  framed.append(contentsOf: [UInt8](repeating: 0x61, count: 1234))
  let result = framed.withUnsafeBytes { raw in
    measure {
      var offset = 0
      var fields = 0
      while true {
        let (event, consumed) = try! parser.parse(UnsafeRawBufferPointer(rebasing: raw[offset...]))
        offset += consumed
        guard let event else { break }
        if case .head(let head) = event { fields = head.headers.count }
        if case .end = event { break }
      }
      return fields
    }
  }
  report("response-head", bytesPerOp: responseHead.count, result)
}

func benchChunked() {
  let result = chunkedBody.withUnsafeBytes { raw in
    measure(batch: 1000) {
      var decoder = HTTPChunkedDecoder()
      var offset = 0
      var total = 0
      while true {
        let (event, consumed) = try! decoder.decode(UnsafeRawBufferPointer(rebasing: raw[offset...]))
        offset += consumed
        guard let event else { break }
        if case .data(let range) = event { total += range.count }
        if case .end = event { break }
      }
      return total
    }
  }
  report("chunked-body", bytesPerOp: chunkedBody.count, result)
}

func benchSerializeHead() {
  let head = try! HTTPRequestParser().parseAllCopy(requestHead)
  var buffer: [UInt8] = []
  buffer.reserveCapacity(1024)
  let result = measure {
    buffer.removeAll(keepingCapacity: true)
    try! HTTPSerializer.writeRequestHead(
      method: head.method, target: head.target, headers: head.headers, framing: .none, into: &buffer)
    return buffer.count
  }
  report("serialize-request-head", bytesPerOp: requestHead.count, result)
}

extension HTTPRequestParser {
  func parseAllCopy(_ bytes: [UInt8]) throws -> HTTPRequestHead {
    var copy = self
    for event in try copy.parseAll(bytes) {
      if case .head(let head) = event { return head }
    }
    fatalError("no head")
  }
}

let selected = CommandLine.arguments.dropFirst().first
let cases: [(String, () -> Void)] = [
  ("request-head", benchRequestHead), ("response-head", benchResponseHead), ("chunked-body", benchChunked),
  ("serialize-request-head", benchSerializeHead), ("json", benchJSON),
]
for (name, run) in cases where selected == nil || selected == name { run() }
