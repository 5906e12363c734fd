import Dispatch
import GatehouseHTTPServer
import GatehouseNet
import Glibc
import Testing

/// `HTTP1ServerConnection` over real loopback connections on an event loop, driven by a
/// blocking client: ordering, holding, keep-alive, 100-continue, deadlines and refusals.
@Suite struct HTTP1ServerConnectionTests {
  // MARK: Pipelining

  /// Requests sent in one go are answered in order, one exchange at a time: the second
  /// head reaches the responder only once the first answer is complete.
  @Test func pipelinedRequestsAreAnsweredInOrder() throws {
    let server = try TestServer { $0.timing = .manual }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/a") + request("/b") + request("/c"))

    for target in ["/a", "/b", "/c"] {
      #expect(eventually { server.log.contains("end \(target)") })
      // Nothing behind reaches the responder while this one waits for its answer.
      #expect(server.log.all.filter { $0.hasPrefix("head ") }.last == "head \(target)")
      try server.answerPending()
      let answer = try #require(client.readAnswer())
      #expect(answer.body == target)
    }
    let log = server.log.all
    #expect(try #require(log.firstIndex(of: "finished /a")) < #require(log.firstIndex(of: "head /b")))
  }

  /// Input behind a request still being answered is held (at most one read), reading is
  /// paused meanwhile, and the held requests are answered once the first one is.
  @Test func heldInputIsBoundedAndReadingPaused() throws {
    let server = try TestServer { $0.timing = .manual }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/first"))
    #expect(eventually { server.log.contains("end /first") })
    // Far more than one read's worth of pipelined requests.
    let count = 5_000
    let behind = Array((0..<count).map { request("/\($0)") }.joined().utf8)
    // Sent from another thread: it blocks until the server reads, which it must not yet.
    let sent = DispatchSemaphore(value: 0)
    let sender = UncheckedTask { try? client.send(behind) }
    DispatchQueue.global().async {
      try? sender.body()
      sent.signal()
    }

    #expect(
      eventually {
        (try? server.inspect { $0.pausedReasons.contains(.pipelining) && $0.connection?.isReadingPaused == true })
          == true
      })
    // Give the kernel time to deliver more if reading were not paused.
    usleep(200_000)
    let held = try #require(try server.inspect { $0.heldByteCount })
    #expect(held > 0)
    #expect(held <= EventLoop.readBufferSize)
    #expect(!server.log.contains("head /0"))

    try server.inspect { ($0.responder as? TestResponder)?.timing = .atEnd }
    try server.answerPending()
    #expect(client.readAnswer()?.body == "/first")
    for index in 0..<count {
      guard let answer = client.readAnswer(), answer.body == "/\(index)" else {
        Issue.record("answer \(index) missing or out of order")
        break
      }
    }
    #expect(sent.wait(timeout: .now() + 20) == .success)
  }

  // MARK: Keep-alive

  /// After a `Connection: close` request nothing more is parsed: its answer says close and
  /// the connection ends.
  @Test func connectionCloseEndsTheConnectionAfterTheAnswer() throws {
    let server = try TestServer()
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/last", headers: ["Connection: close"]) + request("/never"))

    let answer = try #require(client.readAnswer())
    #expect(answer.body == "/last")
    #expect(answer.head.contains("Connection: close"))
    #expect(client.endsWithoutMoreBytes())
    #expect(eventually { server.log.contains("closed") })
    #expect(!server.log.contains("head /never"))
  }

  @Test func http10WithoutKeepAliveIsClosedAfterItsAnswer() throws {
    let server = try TestServer()
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/old", version: "1.0"))

    let answer = try #require(client.readAnswer())
    #expect(answer.body == "/old")
    #expect(answer.head.contains("Connection: close"))
    #expect(client.endsWithoutMoreBytes())
  }

  /// A client that half-closes after its request still gets the answer, made later, and
  /// then the connection ends.
  @Test func halfClosedClientStillGetsItsAnswer() throws {
    let server = try TestServer { $0.timing = .manual }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/half"))
    client.shutdownWrite()
    #expect(eventually { server.log.contains("end /half") })
    #expect(eventually { (try? server.inspect { $0.closeAfterAnswer }) == true })

    try server.answerPending()
    let answer = try #require(client.readAnswer())
    #expect(answer.body == "/half")
    #expect(answer.head.contains("Connection: close"))
    #expect(client.endsWithoutMoreBytes())
  }

  /// A client that half-closes while the rest of its body is being read and dropped after
  /// a whole answer ends its exchange at once: the body will not come, and the connection
  /// does not wait for the idle timeout (here 30 s) to close.
  @Test func halfCloseWhileTheBodyIsDroppedEndsTheExchangeAtOnce() throws {
    let server = try TestServer { $0.timing = .atHead }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send("POST /drop HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nfirst")
    let answer = try #require(client.readAnswer())
    #expect(answer.body == "/drop")
    #expect(eventually { (try? server.inspect { $0.answerComplete && !$0.requestComplete }) == true })

    client.shutdownWrite()
    #expect(eventually(timeout: .seconds(5)) { server.log.contains("finished /drop") })
    #expect(client.endsWithoutMoreBytes())
  }

  // MARK: 100-continue

  /// Asked twice, `100 Continue` goes out once; the body follows and the request is answered
  /// on a connection that goes on.
  @Test func continueIsSentOnce() throws {
    let server = try TestServer { $0.continueAtHead = true }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send("POST /up HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")

    let interim = try #require(client.readAnswer())
    #expect(interim.head.hasPrefix("HTTP/1.1 100 Continue"))
    #expect(eventually { (try? server.inspect { $0.continueSent }) == true })
    try client.send("hello" + request("/next"))
    let answer = try #require(client.readAnswer())
    #expect(answer.head.hasPrefix("HTTP/1.1 200"))
    #expect(answer.body == "/up")
    #expect(!answer.head.contains("Connection: close"))
    // The next answer follows directly: no second 100 Continue in between.
    #expect(client.readAnswer()?.body == "/next")
    #expect(server.log.contains("body hello"))
  }

  /// Answered while the client still waits for 100 Continue (none sent, no body byte came):
  /// the body is not coming, so the connection ends after the answer.
  @Test func answerWithoutTheBodyClosesTheConnection() throws {
    let server = try TestServer { $0.timing = .atHead }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send("POST /refused HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")

    let answer = try #require(client.readAnswer())
    #expect(answer.head.hasPrefix("HTTP/1.1 200"))
    #expect(answer.head.contains("Connection: close"))
    #expect(client.endsWithoutMoreBytes())
    #expect(!server.log.contains("end /refused"))
  }

  // MARK: Deadlines

  /// Half a request within the header timeout gets the responder's 408 and the end; a
  /// connection that sends nothing is just closed.
  @Test func headerTimeoutAnswers408ToAPartialRequest() throws {
    let server = try TestServer(limits: TestServer.short(milliseconds: 300))
    defer { server.shutdown() }
    let partial = try Client(port: server.port)
    let silent = try Client(port: server.port)
    try partial.send("GET /slow HTTP/1.1\r\nHost: te")

    let answer = try #require(partial.readAnswer())
    #expect(answer.head.hasPrefix("HTTP/1.1 408"))
    #expect(answer.head.contains("Connection: close"))
    #expect(partial.endsWithoutMoreBytes())
    #expect(silent.endsWithoutMoreBytes())
    #expect(server.log.all.filter { $0 == "timed out" }.count == 1)
  }

  /// After an answer, a connection that sends no next request is closed after the idle
  /// timeout.
  @Test func idleTimeoutClosesAQuietConnection() throws {
    let server = try TestServer(limits: TestServer.short(milliseconds: 300))
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/once"))

    #expect(client.readAnswer()?.body == "/once")
    #expect(eventually { (try? server.inspect { $0.deadlineKind }) == .idle || server.log.contains("closed") })
    #expect(client.endsWithoutMoreBytes())
    #expect(eventually { server.log.contains("closed") })
  }

  /// With the header timeout covering bodies, a later request whose head came in one read
  /// runs under the header timeout, not the idle one left from the answer before, and an
  /// answer in the works has no connection deadline once the request is whole.
  @Test func answerInTheWorksOutlivesTheIdleTimeout() throws {
    let limits = HTTP1ServerLimits(
      headerTimeoutNanoseconds: 30_000_000_000, idleTimeoutNanoseconds: 200_000_000, headerTimeoutCoversBody: true)
    let server = try TestServer(limits: limits) { $0.timing = .manual }
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send(request("/first"))
    #expect(eventually { server.log.contains("end /first") })
    try server.answerPending()
    #expect(client.readAnswer()?.body == "/first")
    try client.send(request("/second"))
    #expect(eventually { server.log.contains("end /second") })
    #expect(try server.inspect { $0.deadlineKind } == HTTP1DeadlineKind.none)

    // Several idle timeouts pass while the answer is worked on.
    usleep(800_000)
    try server.answerPending()
    #expect(client.readAnswer()?.body == "/second")
    #expect(!server.log.contains("closed"))
  }

  /// A client that reads none of a big answer is reset once it has taken nothing for the
  /// idle timeout.
  @Test func writeDeadlineResetsAClientThatStopsReading() throws {
    let server = try TestServer(limits: TestServer.short(milliseconds: 300)) { $0.bodySize = 32 << 20 }
    defer { server.shutdown() }
    let client = try Client(port: server.port, receiveBufferSize: 4096)
    try client.send(request("/big"))

    #expect(eventually { server.log.contains("answered /big") })
    #expect(eventually(timeout: .seconds(20)) { server.log.contains("closed") })
  }

  /// While a held request waits for a client that is behind on reading, the write deadline
  /// runs (not the idle one, which would close a connection with answers queued).
  @Test func heldRequestsWaitForAClientBehindOnReading() throws {
    let server = try TestServer { $0.bodySize = 8 << 20 }
    defer { server.shutdown() }
    let client = try Client(port: server.port, receiveBufferSize: 4096)
    try client.send(request("/big") + request("/next"))

    #expect(eventually { server.log.contains("answered /big") })
    #expect(eventually { (try? server.inspect { $0.deadlineKind }) == .pipelineWait })
    #expect(!server.log.contains("head /next"))
  }

  // MARK: Refusals

  /// Input the parser refuses gets the responder's answer with the error's status, then
  /// the connection ends.
  @Test func parseErrorIsRefusedAndTheConnectionCloses() throws {
    let server = try TestServer()
    defer { server.shutdown() }
    let client = try Client(port: server.port)
    try client.send("GET / HTTP/1.1\r\nHost: test\r\nBad Header\r\n\r\n" + request("/never"))

    let answer = try #require(client.readAnswer())
    #expect(answer.head.hasPrefix("HTTP/1.1 400"))
    #expect(answer.head.contains("Connection: close"))
    #expect(client.endsWithoutMoreBytes())
    #expect(server.log.contains("refused 400"))
    #expect(!server.log.contains("head /never"))
  }
}
