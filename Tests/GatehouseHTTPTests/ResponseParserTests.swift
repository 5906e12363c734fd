import GatehouseHTTP
import Testing

@Suite struct ResponseParserTests {
  @Test func contentLengthResponse() throws {
    let events = try parseResponses(pieces: [
      bytes("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    ])
    let head = try #require(events.first?.responseHead)
    #expect(head.status == 200)
    #expect(head.reasonString == "OK")
    #expect(head.headers["content-type"] == "application/json")
    #expect(head.bodyFraming == .contentLength(2))
    #expect(head.keepAlive)
    #expect(Array(events.dropFirst()) == [.body(bytes("{}")), .end(nil)])
  }

  @Test func statusLineWithoutReasonIsAccepted() throws {
    let events = try parseResponses(pieces: [bytes("HTTP/1.1 204\r\n\r\n")])
    #expect(events.first?.responseHead?.status == 204)
    #expect(events.first?.responseHead?.reasonString == "")
  }

  @Test func chunkedResponseWithTrailers() throws {
    let events = try parseResponses(pieces: [
      bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n")
    ])
    #expect(events[1] == .body(bytes("abcde")))
    #expect(events[2] == .end(HTTPHeaders([("X-T", "1")])))
  }

  @Test func bodyUntilCloseEndsAtEOF() throws {
    let events = try parseResponses(pieces: [bytes("HTTP/1.1 200 OK\r\n\r\nsome"), bytes(" body")], atEOF: true)
    #expect(events.first?.responseHead?.bodyFraming == .untilClose)
    #expect(events.first?.responseHead?.keepAlive == false)
    #expect(Array(events.dropFirst()) == [.body(bytes("some body")), .end(nil)])
  }

  @Test func answerToHEADHasNoBodyButKeepsItsLength() throws {
    var parser = HTTPResponseParser()
    parser.requestWasHEAD = true
    let raw = bytes("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
    let events = try parser.parseAll(raw)
    let head = try #require(events.first.flatMap { if case .head(let h) = $0 { h } else { nil } })
    #expect(head.bodyFraming == .none)
    #expect(head.contentLength == 1234)
    #expect(events[1] == .end(nil))
    // The flag lasts for one answer only; the next one has its body.
    guard case .head(let second) = events[2] else {
      Issue.record("expected a second head")
      return
    }
    #expect(second.bodyFraming == .contentLength(1))
  }

  @Test(arguments: [204, 304])
  func noBodyStatuses(_ status: Int) throws {
    let events = try parseResponses(pieces: [bytes("HTTP/1.1 \(status) X\r\nContent-Length: 10\r\n\r\n")])
    #expect(events.first?.responseHead?.bodyFraming == HTTPBodyFraming.none)
    #expect(events.count == 2)
  }

  @Test func informationalHeadsComeBeforeTheFinalOne() throws {
    let events = try parseResponses(pieces: [
      bytes(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"
      )
    ])
    #expect(events.compactMap { $0.responseHead?.status } == [100, 103, 200])
    #expect(events.last == .end(nil))
  }

  @Test func switchingProtocolsIsRefused() {
    #expect(responseError("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n") == .unexpectedInformational)
  }

  @Test func http10ResponseClosesUnlessKeepAlive() throws {
    let plain = try parseResponses(pieces: [bytes("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")])
    #expect(plain.first?.responseHead?.keepAlive == false)
    let kept = try parseResponses(pieces: [
      bytes("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
    ])
    #expect(kept.first?.responseHead?.keepAlive == true)
  }

  @Test func malformedResponsesAreRefused() {
    #expect(
      responseError("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
        == .contentLengthWithTransferEncoding)
    #expect(
      responseError("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n") == .duplicateContentLength)
    #expect(responseError("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n") == .unsupportedTransferEncoding)
    #expect(responseError("HTTP/1.1 2000 OK\r\n\r\n") == .invalidStatusLine)
    #expect(responseError("HTTP/1.1 099 Low\r\n\r\n") == .invalidStatusLine)
    #expect(responseError("HTTP/1.1 600 High\r\n\r\n") == .invalidStatusLine)
    #expect(responseError("HTTP/1.1 20x OK\r\n\r\n") == .invalidStatusLine)
    #expect(responseError("HTTP/1.1  200 OK\r\n\r\n") == .invalidStatusLine)
    #expect(responseError("ICY 200 OK\r\n\r\n") == .invalidVersion)
    #expect(responseError("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n") == .invalidChunkSize)
    #expect(responseError("HTTP/1.1 200 O\u{01}K\r\n\r\n") == .invalidStatusLine)
  }

  @Test func truncatedBodiesAreReportedAtEOF() throws {
    var parser = HTTPResponseParser()
    _ = try parser.parseAll(bytes("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
    #expect(throws: HTTPParseError.unexpectedEOF) { try parser.finish() }
    var chunked = HTTPResponseParser()
    _ = try chunked.parseAll(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"))
    #expect(throws: HTTPParseError.unexpectedEOF) { try chunked.finish() }
  }

  @Test func bytesAfterAClosingResponseAreAnError() throws {
    var parser = HTTPResponseParser()
    _ = try parser.parseAll(bytes("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"))
    #expect(parser.isClosed)
    #expect(throws: HTTPParseError.invalidMessageAfterClose) { try parser.parseAll(bytes("junk")) }
  }
}
