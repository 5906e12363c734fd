import GatehouseHTTP

#if canImport(Glibc)
  import Glibc
#endif

/// One answer of the admin API, read whole.
struct AdminHTTPAnswer {
  let status: Int
  let headers: HTTPHeaders
  let body: [UInt8]

  var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// Why an admin call got no HTTP answer. The text is what the operator reads.
struct AdminClientError: Error, CustomStringConvertible {
  let description: String
}

/// A minimal blocking HTTP/1.1 client for the `admin` command: one request per connection
/// (`Connection: close`), POSIX sockets with send/receive timeouts (and TLS for https,
/// see `AdminConnection`), answers parsed with
/// `GatehouseHTTP`'s `HTTPResponseParser`. Admin answers are small; bodies are capped at 64 MiB.
struct AdminHTTPClient {
  /// Where to connect: a host name or address literal, and a port.
  var host: String
  var port: UInt16
  /// The `Host` field (the name the operator gave, even when `host` is one resolved address).
  var hostHeader: String
  var timeoutSeconds: Int = 30
  /// Set for an https `--url`: the request goes through a verified TLS session.
  var tls: AdminTLS?

  /// Sends one request and reads the whole answer.
  func send(method: HTTPMethod, target: String, headers extra: [(String, String)] = [], body: [UInt8]? = nil)
    throws(AdminClientError) -> AdminHTTPAnswer
  {
    var headers = HTTPHeaders()
    headers.add(name: "Host", value: hostHeader)
    headers.add(name: "User-Agent", value: "gatehouse-admin/\(GatehouseVersion.string)")
    headers.add(name: "Accept", value: "application/json")
    headers.add(name: "Connection", value: "close")
    for (name, value) in extra { headers.add(name: name, value: value) }
    // Methods that may carry a body always say how long it is, even when empty: some servers
    // wait for a body on a POST without a length.
    let framing: HTTPBodyFraming =
      body != nil || method == .post || method == .put ? .contentLength(Int64(body?.count ?? 0)) : .none
    var request: [UInt8] = []
    do {
      try HTTPSerializer.writeRequestHead(
        method: method, target: ArraySlice(target.utf8), headers: headers, framing: framing, into: &request)
    } catch {
      throw AdminClientError(description: "cannot send the request: \(error)")
    }
    if let body { request.append(contentsOf: body) }

    let socket = try connect()
    let connection: AdminConnection
    do throws(AdminClientError) {
      connection = try AdminConnection(socket: socket, tls: tls, endpoint: endpoint, timeoutSeconds: timeoutSeconds)
    } catch {
      close(socket)
      throw error
    }
    defer { connection.close() }
    try connection.sendAll(request)
    return try readAnswer(connection, requestWasHEAD: method == .head)
  }

  private var endpoint: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

  /// Resolves `host` and connects to the first address that answers.
  private func connect() throws(AdminClientError) -> Int32 {
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, String(port), &hints, &list)
    guard status == 0, let first = list else {
      throw AdminClientError(description: "cannot resolve \(host): \(String(cString: gai_strerror(status)))")
    }
    defer { freeaddrinfo(list) }
    var lastError: Int32 = 0
    var current: UnsafeMutablePointer<addrinfo>? = first
    while let info = current {
      current = info.pointee.ai_next
      let descriptor = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), 0)
      guard descriptor >= 0 else {
        lastError = errno
        continue
      }
      // On Linux, SO_SNDTIMEO also bounds connect(2); SO_RCVTIMEO bounds each read.
      var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
      setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
      setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
      if Glibc.connect(descriptor, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return descriptor }
      lastError = errno
      close(descriptor)
    }
    throw AdminClientError(description: "cannot connect to \(endpoint): \(Self.describe(lastError))")
  }

  private func readAnswer(_ connection: AdminConnection, requestWasHEAD: Bool) throws(AdminClientError)
    -> AdminHTTPAnswer
  {
    var parser = HTTPResponseParser()
    parser.requestWasHEAD = requestWasHEAD
    var head: HTTPResponseHead?
    var body: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    var pending: [UInt8] = []
    var atEOF = false
    while true {
      // Feed what is buffered until the parser wants more bytes.
      var progressed = true
      while progressed {
        progressed = false
        let step: (event: HTTPResponseEvent?, consumed: Int)
        // Array's closure APIs are not typed-throws, so the parse error crosses as a Result.
        let result = pending.withUnsafeBytes { raw in
          Result { () throws(HTTPParseError) in try parser.parse(raw) }
        }
        switch result {
        case .success(let parsed): step = parsed
        case .failure(let error): throw AdminClientError(description: "bad answer from \(endpoint): \(error)")
        }
        if let event = step.event {
          switch event {
          case .head(let parsed):
            if !parsed.isInformational { head = parsed }
          case .body(let range):
            body.append(contentsOf: pending[range])
            if body.count > 64 << 20 { throw AdminClientError(description: "answer from \(endpoint) is too large") }
          case .end:
            guard let head else { throw AdminClientError(description: "bad answer from \(endpoint): no head") }
            return AdminHTTPAnswer(status: head.status, headers: head.headers, body: body)
          }
          progressed = true
        }
        if step.consumed > 0 {
          pending.removeFirst(step.consumed)
          progressed = true
        }
      }
      if atEOF {
        do {
          if case .end? = try parser.finish(), let head {
            return AdminHTTPAnswer(status: head.status, headers: head.headers, body: body)
          }
        } catch {}
        throw AdminClientError(description: "\(endpoint) closed the connection before a complete answer")
      }
      // Array's closure APIs are not typed-throws, so the read error crosses as a Result.
      let received = buffer.withUnsafeMutableBytes { raw in
        Result { () throws(AdminClientError) in try connection.receive(into: raw) }
      }
      let count = try received.get()
      if count == 0 {
        atEOF = true
      } else {
        pending.append(contentsOf: buffer[0..<count])
      }
    }
  }

  static func describe(_ code: Int32) -> String {
    code == 0 ? "no address" : String(cString: strerror(code))
  }

  /// Every IPv4 address (A record) of `name`, in resolver order without repeats: the
  /// replicas of a headless Service (Docs/admin-tools.md).
  static func resolveIPv4(_ name: String) throws(AdminClientError) -> [String] {
    var hints = addrinfo()
    hints.ai_family = AF_INET
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(name, nil, &hints, &list)
    guard status == 0 else {
      throw AdminClientError(description: "cannot resolve \(name): \(String(cString: gai_strerror(status)))")
    }
    defer { freeaddrinfo(list) }
    var addresses: [String] = []
    var current = list
    while let info = current {
      current = info.pointee.ai_next
      guard let address = info.pointee.ai_addr else { continue }
      let text = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { inet in
        var storage = inet.pointee.sin_addr
        var characters = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        _ = inet_ntop(AF_INET, &storage, &characters, socklen_t(INET_ADDRSTRLEN))
        return String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      }
      if !addresses.contains(text) { addresses.append(text) }
    }
    return addresses
  }
}
