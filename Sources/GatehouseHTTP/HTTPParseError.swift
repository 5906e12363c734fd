/// Why a message was refused, and the status a server answers with before closing.
///
/// A struct over a private enum (as SwiftNIO does) so new cases do not break callers that
/// switch on `status`.
public struct HTTPParseError: Error, Hashable, Sendable, CustomStringConvertible {
  @usableFromInline
  enum Code: UInt8, Sendable {
    case invalidLeadingLine, invalidMethod, invalidTarget, invalidVersion, unsupportedVersion
    case requestLineTooLong, invalidStatusLine
    case invalidHeaderName, whitespaceBeforeColon, missingColon, obsoleteLineFolding
    case bareCR, bareLF, invalidHeaderValue, headersTooLarge, tooManyHeaders
    case invalidContentLength, duplicateContentLength, contentLengthWithTransferEncoding
    case duplicateTransferEncoding, invalidTransferEncoding, unsupportedTransferEncoding
    case transferEncodingInHTTP10, missingHost, duplicateHost, invalidHost
    case invalidChunkSize, chunkSizeOverflow, invalidChunkExtension, chunkExtensionTooLong
    case missingChunkCRLF, forbiddenTrailer, bodyTooLarge, unexpectedEOF
    case unexpectedInformational, invalidMessageAfterClose
    case dotSegment, asteriskForm, methodNotSupported
  }

  @usableFromInline let code: Code

  @usableFromInline init(_ code: Code) { self.code = code }

  public static let invalidLeadingLine = Self(.invalidLeadingLine)
  public static let invalidMethod = Self(.invalidMethod)
  public static let invalidTarget = Self(.invalidTarget)
  public static let invalidVersion = Self(.invalidVersion)
  public static let unsupportedVersion = Self(.unsupportedVersion)
  public static let requestLineTooLong = Self(.requestLineTooLong)
  public static let invalidStatusLine = Self(.invalidStatusLine)
  public static let invalidHeaderName = Self(.invalidHeaderName)
  public static let whitespaceBeforeColon = Self(.whitespaceBeforeColon)
  public static let missingColon = Self(.missingColon)
  public static let obsoleteLineFolding = Self(.obsoleteLineFolding)
  public static let bareCR = Self(.bareCR)
  public static let bareLF = Self(.bareLF)
  public static let invalidHeaderValue = Self(.invalidHeaderValue)
  public static let headersTooLarge = Self(.headersTooLarge)
  public static let tooManyHeaders = Self(.tooManyHeaders)
  public static let invalidContentLength = Self(.invalidContentLength)
  public static let duplicateContentLength = Self(.duplicateContentLength)
  public static let contentLengthWithTransferEncoding = Self(.contentLengthWithTransferEncoding)
  public static let duplicateTransferEncoding = Self(.duplicateTransferEncoding)
  public static let invalidTransferEncoding = Self(.invalidTransferEncoding)
  public static let unsupportedTransferEncoding = Self(.unsupportedTransferEncoding)
  public static let transferEncodingInHTTP10 = Self(.transferEncodingInHTTP10)
  public static let missingHost = Self(.missingHost)
  public static let duplicateHost = Self(.duplicateHost)
  public static let invalidHost = Self(.invalidHost)
  public static let invalidChunkSize = Self(.invalidChunkSize)
  public static let chunkSizeOverflow = Self(.chunkSizeOverflow)
  public static let invalidChunkExtension = Self(.invalidChunkExtension)
  public static let chunkExtensionTooLong = Self(.chunkExtensionTooLong)
  public static let missingChunkCRLF = Self(.missingChunkCRLF)
  public static let forbiddenTrailer = Self(.forbiddenTrailer)
  public static let bodyTooLarge = Self(.bodyTooLarge)
  public static let unexpectedEOF = Self(.unexpectedEOF)
  public static let unexpectedInformational = Self(.unexpectedInformational)
  public static let invalidMessageAfterClose = Self(.invalidMessageAfterClose)
  /// A `.` or `..` segment in the request path, plain or percent-encoded.
  public static let dotSegment = Self(.dotSegment)
  /// `OPTIONS *`: a server-wide request, which has no route to go to.
  public static let asteriskForm = Self(.asteriskForm)
  /// CONNECT or TRACE, which the gateway never forwards.
  public static let methodNotSupported = Self(.methodNotSupported)

  /// The status a server sends for this error before closing the connection.
  public var status: Int {
    switch code {
    case .headersTooLarge, .tooManyHeaders: return 431
    case .bodyTooLarge: return 413
    case .requestLineTooLong: return 414
    case .unsupportedTransferEncoding, .methodNotSupported: return 501
    case .unsupportedVersion: return 505
    case .invalidLeadingLine, .invalidMethod, .invalidTarget, .invalidVersion, .invalidStatusLine,
      .invalidHeaderName, .whitespaceBeforeColon, .missingColon, .obsoleteLineFolding, .bareCR,
      .bareLF, .invalidHeaderValue, .invalidContentLength, .duplicateContentLength,
      .contentLengthWithTransferEncoding, .duplicateTransferEncoding, .invalidTransferEncoding,
      .transferEncodingInHTTP10, .missingHost, .duplicateHost, .invalidHost, .invalidChunkSize,
      .chunkSizeOverflow, .invalidChunkExtension, .chunkExtensionTooLong, .missingChunkCRLF,
      .forbiddenTrailer, .unexpectedEOF, .unexpectedInformational, .invalidMessageAfterClose, .dotSegment,
      .asteriskForm:
      return 400
    }
  }

  public var description: String {
    switch code {
    case .invalidLeadingLine: return "invalid empty line before the start line"
    case .invalidMethod: return "invalid method"
    case .invalidTarget: return "invalid request target"
    case .invalidVersion: return "invalid HTTP version"
    case .unsupportedVersion: return "unsupported HTTP version"
    case .requestLineTooLong: return "request line too long"
    case .invalidStatusLine: return "invalid status line"
    case .invalidHeaderName: return "invalid header name"
    case .whitespaceBeforeColon: return "whitespace before the colon of a header"
    case .missingColon: return "header line without a colon"
    case .obsoleteLineFolding: return "obsolete line folding"
    case .bareCR: return "CR not followed by LF"
    case .bareLF: return "line ended by LF without CR"
    case .invalidHeaderValue: return "control byte in a header value"
    case .headersTooLarge: return "headers too large"
    case .tooManyHeaders: return "too many headers"
    case .invalidContentLength: return "invalid Content-Length"
    case .duplicateContentLength: return "more than one Content-Length"
    case .contentLengthWithTransferEncoding: return "both Content-Length and Transfer-Encoding"
    case .duplicateTransferEncoding: return "more than one Transfer-Encoding"
    case .invalidTransferEncoding: return "invalid Transfer-Encoding"
    case .unsupportedTransferEncoding: return "unsupported Transfer-Encoding"
    case .transferEncodingInHTTP10: return "Transfer-Encoding in an HTTP/1.0 message"
    case .missingHost: return "missing Host"
    case .duplicateHost: return "more than one Host"
    case .invalidHost: return "invalid Host"
    case .invalidChunkSize: return "invalid chunk size"
    case .chunkSizeOverflow: return "chunk size too large"
    case .invalidChunkExtension: return "invalid chunk extension"
    case .chunkExtensionTooLong: return "chunk extension too long"
    case .missingChunkCRLF: return "chunk data not followed by CRLF"
    case .forbiddenTrailer: return "forbidden field in trailers"
    case .bodyTooLarge: return "body too large"
    case .unexpectedEOF: return "connection closed inside a message"
    case .unexpectedInformational: return "unexpected informational response"
    case .invalidMessageAfterClose: return "data after the last message"
    case .dotSegment: return "the request path has a . or .. segment"
    case .asteriskForm: return "OPTIONS * is not supported (send OPTIONS to a path)"
    case .methodNotSupported: return "CONNECT and TRACE are not supported"
    }
  }
}
