/// The resumable core of both validators: a byte-at-a-time state machine whose whole state is
/// this struct plus a depth stack of one bit per open container (1 = object, 0 = array) that
/// the caller owns. `scan` can stop after any byte and resume with the next piece, so the
/// whole-buffer validator is one `scan` plus `finish`, and both report identical errors. It is
/// also the tree parser's grammar: `JSONParser` builds its tree from what this accepted.
struct JSONScanner: Sendable {
  /// What the next byte may be.
  enum Mode: UInt8 {
    /// A value (at the top level, after `:`, or after `,` in an array).
    case value
    /// Right after `[`: a value or `]`.
    case arrayFirstValue
    /// Right after `{`: a key or `}`.
    case objectFirstKey
    /// After `,` in an object: a key.
    case key
    /// After a key: `:`.
    case colon
    /// After a value inside a container: `,` or the closing bracket.
    case afterValue
    /// After the top-level value: whitespace only.
    case done
    /// Inside a string.
    case string
    /// After a backslash in a string.
    case escape
    /// Inside the four hex digits of `\u`.
    case unicodeEscape
    /// After a high surrogate escape: the `\` of its low half.
    case surrogateBackslash
    /// After a high surrogate escape and `\`: the `u` of its low half.
    case surrogateU
    /// Inside a multi-byte UTF-8 sequence in a string.
    case utf8Continuation
    /// After `-`.
    case numberMinus
    /// After a leading `0` (or `-0`).
    case numberZero
    /// In the integer digits after `1`–`9`.
    case numberInteger
    /// After `.`.
    case numberDot
    /// In the fraction digits.
    case numberFraction
    /// After `e` or `E`.
    case numberExponentMark
    /// After the exponent sign.
    case numberExponentSign
    /// In the exponent digits.
    case numberExponent
    /// Inside `true`, `false` or `null`.
    case literal
    /// An error was reported; every later call reports it again.
    case failed
  }

  let maxDepth: Int
  let allowsLoneSurrogates: Bool

  private(set) var mode = Mode.value
  private(set) var depth = 0
  /// Bytes of the pieces already scanned, so error offsets count from the document start.
  private(set) var consumed = 0
  private(set) var error: JSONError?

  /// Whether the string being scanned is an object key (then `:` follows) or a value.
  private var stringIsKey = false
  /// Whether the `\u` escape being read must be a low surrogate.
  private var lowSurrogateExpected = false
  /// Hex digits left in `\u`, continuation bytes left in UTF-8, or literal bytes left.
  private var counter: UInt8 = 0
  /// The `\u` code unit read so far.
  private var codeUnit: UInt32 = 0
  /// The expected remaining bytes of a literal, next byte lowest.
  private var literalBytes: UInt64 = 0
  /// The range the next UTF-8 continuation byte must fall in; narrower than 80–BF right after
  /// E0, ED, F0 and F4, which is what rules out overlong forms, surrogates and > U+10FFFF.
  private var utf8Low: UInt8 = 0x80
  private var utf8High: UInt8 = 0xBF

  /// `offset` is where the first piece starts in the document, so that error offsets count
  /// from the document start (the tree parser starts after a byte order mark, and a second
  /// one there is an unexpected byte, not a byte order mark). `inString` starts inside a
  /// top-level string: the tree parser reads on past invalid UTF-8 that way, since it reports
  /// a string's other errors first.
  init(options: JSONValidationOptions, startingAt offset: Int = 0, inString: Bool = false) {
    maxDepth = options.maxDepth
    allowsLoneSurrogates = options.allowsLoneSurrogates
    consumed = offset
    if inString { mode = .string }
  }

  /// Words of depth stack needed for `maxDepth` (at least one, so the pointer is never empty).
  static func stackWords(maxDepth: Int) -> Int { max(1, (maxDepth + 63) >> 6) }

  /// Scans the rest of the document as one piece and checks that it is complete: the first
  /// error, or nil. The depth stack lives on the stack for the call.
  mutating func scanToEnd(_ bytes: UnsafeRawBufferPointer) -> JSONError? {
    withUnsafeTemporaryAllocation(of: UInt64.self, capacity: Self.stackWords(maxDepth: maxDepth)) { stack in
      scan(bytes, stack: stack.baseAddress!) ?? finish()
    }
  }

  /// Scans one piece. Returns the first error, or nil when every byte so far can still start
  /// a valid document.
  // The locals mirror the stored state so that the hot loops work in registers; the state is
  // written back once at the end.
  mutating func scan(_ bytes: UnsafeRawBufferPointer, stack: UnsafeMutablePointer<UInt64>) -> JSONError? {
    if let error { return error }
    let n = bytes.count
    guard n > 0, let raw = bytes.baseAddress else { return nil }
    let p = raw.assumingMemoryBound(to: UInt8.self)
    var i = 0
    var mode = self.mode
    var depth = self.depth
    var counter = self.counter
    var codeUnit = self.codeUnit
    var literalBytes = self.literalBytes
    var stringIsKey = self.stringIsKey
    var lowSurrogateExpected = self.lowSurrogateExpected
    var utf8Low = self.utf8Low
    var utf8High = self.utf8High
    var failure: JSONError.Reason?
    let maxDepth = self.maxDepth
    let allowsLoneSurrogates = self.allowsLoneSurrogates

    scanning: while i < n {
      switch mode {
      case .string:
        while true {
          while i &+ 8 <= n {
            let mask = Self.stringStopMask(UInt64(littleEndian: UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self)))
            if mask != 0 {
              i &+= mask.trailingZeroBitCount &>> 3
              break
            }
            i &+= 8
          }
          var c: UInt8 = 0
          while i < n {
            c = p[i]
            if c == 0x22 || c == 0x5C || c < 0x20 || c >= 0x80 { break }
            i &+= 1
          }
          if i == n { break scanning }
          if c == 0x22 {
            i &+= 1
            // Fast transitions for the compact common cases (`"key":"value"`, `"value","key"`)
            // stay in this loop instead of a trip through the mode switch per token.
            if stringIsKey {
              if i &+ 1 < n && p[i] == 0x3A {
                if p[i &+ 1] == 0x22 {
                  i &+= 2
                  stringIsKey = false
                  continue
                }
                i &+= 1
                mode = .value
              } else {
                mode = .colon
              }
              continue scanning
            }
            if depth == 0 {
              mode = .done
              continue scanning
            }
            if i &+ 1 < n && p[i] == 0x2C && p[i &+ 1] == 0x22 {
              i &+= 2
              stringIsKey = Self.isObject(stack, depth &- 1)
              continue
            }
            mode = .afterValue
            continue scanning
          }
          if c == 0x5C {
            i &+= 1
            mode = .escape
            continue scanning
          }
          if c < 0x20 {
            failure = .controlCharacterInString
            break scanning
          }
          switch c {
          case 0xC2...0xDF: (counter, utf8Low, utf8High) = (1, 0x80, 0xBF)
          case 0xE0: (counter, utf8Low, utf8High) = (2, 0xA0, 0xBF)
          case 0xED: (counter, utf8Low, utf8High) = (2, 0x80, 0x9F)
          case 0xE1...0xEF: (counter, utf8Low, utf8High) = (2, 0x80, 0xBF)
          case 0xF0: (counter, utf8Low, utf8High) = (3, 0x90, 0xBF)
          case 0xF1...0xF3: (counter, utf8Low, utf8High) = (3, 0x80, 0xBF)
          case 0xF4: (counter, utf8Low, utf8High) = (3, 0x80, 0x8F)
          default:
            failure = .invalidUTF8
            break scanning
          }
          i &+= 1
          while counter > 0 {
            if i == n {
              mode = .utf8Continuation
              break scanning
            }
            let next = p[i]
            if next < utf8Low || next > utf8High {
              failure = .invalidUTF8
              break scanning
            }
            (utf8Low, utf8High) = (0x80, 0xBF)
            counter &-= 1
            i &+= 1
          }
        }

      case .value, .arrayFirstValue:
        var c = p[i]
        while Self.isWhitespace(c) {
          i &+= 1
          if i == n { break scanning }
          c = p[i]
        }
        switch c {
        case 0x22:
          i &+= 1
          stringIsKey = false
          mode = .string
        case 0x7B, 0x5B:
          if depth >= maxDepth {
            failure = .depthLimitExceeded
            break scanning
          }
          let bit: UInt64 = 1 &<< UInt64(depth & 63)
          if c == 0x7B {
            stack[depth &>> 6] |= bit
            mode = .objectFirstKey
            if i &+ 1 < n && p[i &+ 1] == 0x22 {
              // `{"`: straight into the first key.
              i &+= 1
              stringIsKey = true
              mode = .string
            }
          } else {
            stack[depth &>> 6] &= ~bit
            mode = .arrayFirstValue
          }
          depth &+= 1
          i &+= 1
        case 0x30:
          i &+= 1
          mode = .numberZero
        case 0x31...0x39:
          i &+= 1
          mode = .numberInteger
        case 0x2D:
          i &+= 1
          mode = .numberMinus
        case 0x74:  // t
          (literalBytes, counter) = (0x65_75_72, 3)
          i &+= 1
          mode = .literal
        case 0x66:  // f
          (literalBytes, counter) = (0x65_73_6C_61, 4)
          i &+= 1
          mode = .literal
        case 0x6E:  // n
          (literalBytes, counter) = (0x6C_6C_75, 3)
          i &+= 1
          mode = .literal
        case 0x5D:
          if mode == .arrayFirstValue {
            depth &-= 1
            i &+= 1
            mode = depth == 0 ? .done : .afterValue
          } else {
            // `]` where a value must come: after `,` in an array that is a trailing comma.
            let inArray = depth > 0 && !Self.isObject(stack, depth &- 1)
            failure = inArray ? .trailingComma : .unexpectedByte
            break scanning
          }
        case 0xEF where consumed &+ i == 0:
          failure = .byteOrderMark
          break scanning
        default:
          failure = .unexpectedByte
          break scanning
        }

      case .afterValue:
        // Loops here through runs of closing brackets (`}]},`), a mode switch saved per byte.
        while true {
          var c = p[i]
          while Self.isWhitespace(c) {
            i &+= 1
            if i == n { break scanning }
            c = p[i]
          }
          let inObject = Self.isObject(stack, depth &- 1)
          switch c {
          case 0x2C:
            i &+= 1
            if inObject && i < n && p[i] == 0x22 {
              i &+= 1
              stringIsKey = true
              mode = .string
            } else {
              mode = inObject ? .key : .value
            }
            continue scanning
          case 0x5D, 0x7D:
            if inObject != (c == 0x7D) {
              failure = .mismatchedClose
              break scanning
            }
            depth &-= 1
            i &+= 1
            if depth == 0 {
              mode = .done
              continue scanning
            }
            if i == n { break scanning }
          default:
            failure = .expectedCommaOrClose
            break scanning
          }
        }

      case .objectFirstKey, .key:
        var c = p[i]
        while Self.isWhitespace(c) {
          i &+= 1
          if i == n { break scanning }
          c = p[i]
        }
        if c == 0x22 {
          i &+= 1
          stringIsKey = true
          mode = .string
        } else if c == 0x7D && mode == .objectFirstKey {
          depth &-= 1
          i &+= 1
          mode = depth == 0 ? .done : .afterValue
        } else {
          failure = c == 0x7D ? .trailingComma : .expectedKey
          break scanning
        }

      case .colon:
        var c = p[i]
        while Self.isWhitespace(c) {
          i &+= 1
          if i == n { break scanning }
          c = p[i]
        }
        guard c == 0x3A else {
          failure = .expectedColon
          break scanning
        }
        i &+= 1
        mode = .value

      case .done:
        while Self.isWhitespace(p[i]) {
          i &+= 1
          if i == n { break scanning }
        }
        failure = .trailingContent
        break scanning

      case .escape:
        switch p[i] {
        case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74:
          i &+= 1
          mode = .string
        case 0x75:
          i &+= 1
          (counter, codeUnit) = (4, 0)
          mode = .unicodeEscape
        default:
          failure = .invalidEscape
          break scanning
        }

      case .unicodeEscape:
        while counter > 0 {
          if i == n { break scanning }
          let digit = Self.hexValue(p[i])
          if digit > 15 {
            failure = .invalidUnicodeEscape
            break scanning
          }
          codeUnit = codeUnit &<< 4 | digit
          counter &-= 1
          if counter == 0 {
            let isHigh = codeUnit & 0xFC00 == 0xD800
            let isLow = codeUnit & 0xFC00 == 0xDC00
            if lowSurrogateExpected {
              if isLow {
                lowSurrogateExpected = false
                mode = .string
              } else if allowsLoneSurrogates {
                lowSurrogateExpected = isHigh
                mode = isHigh ? .surrogateBackslash : .string
              } else {
                failure = .loneSurrogate
                break scanning
              }
            } else if isHigh {
              lowSurrogateExpected = true
              mode = .surrogateBackslash
            } else if isLow && !allowsLoneSurrogates {
              failure = .loneSurrogate
              break scanning
            } else {
              mode = .string
            }
          }
          i &+= 1
        }

      case .surrogateBackslash:
        if p[i] == 0x5C {
          i &+= 1
          mode = .surrogateU
        } else if allowsLoneSurrogates {
          lowSurrogateExpected = false
          mode = .string  // the byte is ordinary string content: scan it again there
        } else {
          failure = .loneSurrogate
          break scanning
        }

      case .surrogateU:
        if p[i] == 0x75 {
          i &+= 1
          (counter, codeUnit) = (4, 0)
          mode = .unicodeEscape
        } else if allowsLoneSurrogates {
          lowSurrogateExpected = false
          mode = .escape  // some other escape (`\n`): check it there
        } else {
          failure = .loneSurrogate
          break scanning
        }

      case .utf8Continuation:
        while counter > 0 {
          if i == n { break scanning }
          let next = p[i]
          if next < utf8Low || next > utf8High {
            failure = .invalidUTF8
            break scanning
          }
          (utf8Low, utf8High) = (0x80, 0xBF)
          counter &-= 1
          i &+= 1
        }
        mode = .string

      case .numberMinus:
        let c = p[i]
        if c == 0x30 {
          mode = .numberZero
        } else if c &- 0x31 < 9 {
          mode = .numberInteger
        } else {
          failure = .invalidNumber
          break scanning
        }
        i &+= 1

      case .numberZero:
        let c = p[i]
        if c == 0x2E {
          i &+= 1
          mode = .numberDot
        } else if c | 0x20 == 0x65 {
          i &+= 1
          mode = .numberExponentMark
        } else if c &- 0x30 < 10 {
          failure = .leadingZero
          break scanning
        } else {
          mode = depth == 0 ? .done : .afterValue  // the number ended before this byte
        }

      case .numberInteger:
        while p[i] &- 0x30 < 10 {
          i &+= 1
          if i == n { break scanning }
        }
        let c = p[i]
        if c == 0x2E {
          i &+= 1
          mode = .numberDot
        } else if c | 0x20 == 0x65 {
          i &+= 1
          mode = .numberExponentMark
        } else if c == 0x2C && depth > 0 && i &+ 1 < n && p[i &+ 1] == 0x22 {
          // `123,"`: straight to the next key or string element.
          i &+= 2
          stringIsKey = Self.isObject(stack, depth &- 1)
          mode = .string
        } else {
          mode = depth == 0 ? .done : .afterValue
        }

      case .numberDot:
        guard p[i] &- 0x30 < 10 else {
          failure = .invalidNumber
          break scanning
        }
        i &+= 1
        mode = .numberFraction

      case .numberFraction:
        while p[i] &- 0x30 < 10 {
          i &+= 1
          if i == n { break scanning }
        }
        if p[i] | 0x20 == 0x65 {
          i &+= 1
          mode = .numberExponentMark
        } else {
          mode = depth == 0 ? .done : .afterValue
        }

      case .numberExponentMark:
        let c = p[i]
        if c == 0x2B || c == 0x2D {
          mode = .numberExponentSign
        } else if c &- 0x30 < 10 {
          mode = .numberExponent
        } else {
          failure = .invalidNumber
          break scanning
        }
        i &+= 1

      case .numberExponentSign:
        guard p[i] &- 0x30 < 10 else {
          failure = .invalidNumber
          break scanning
        }
        i &+= 1
        mode = .numberExponent

      case .numberExponent:
        while p[i] &- 0x30 < 10 {
          i &+= 1
          if i == n { break scanning }
        }
        mode = depth == 0 ? .done : .afterValue

      case .literal:
        while counter > 0 {
          if i == n { break scanning }
          if p[i] != UInt8(truncatingIfNeeded: literalBytes) {
            failure = .invalidLiteral
            break scanning
          }
          literalBytes &>>= 8
          counter &-= 1
          i &+= 1
        }
        mode = depth == 0 ? .done : .afterValue

      case .failed:
        preconditionFailure("scan after failure returns the stored error first")
      }
    }

    if let failure {
      let error = JSONError(offset: consumed &+ i, reason: failure)
      self.error = error
      self.mode = .failed
      return error
    }
    self.mode = mode
    self.depth = depth
    self.counter = counter
    self.codeUnit = codeUnit
    self.literalBytes = literalBytes
    self.stringIsKey = stringIsKey
    self.lowSurrogateExpected = lowSurrogateExpected
    self.utf8Low = utf8Low
    self.utf8High = utf8High
    consumed &+= n
    return nil
  }

  /// Checks that the bytes scanned so far are one complete document.
  mutating func finish() -> JSONError? {
    if let error { return error }
    switch mode {
    case .done:
      return nil
    case .numberZero, .numberInteger, .numberFraction, .numberExponent:
      // A number is only complete at the end of input when it is the whole document.
      if depth == 0 {
        mode = .done
        return nil
      }
    case .value, .arrayFirstValue, .objectFirstKey, .key, .colon, .afterValue, .string, .escape, .unicodeEscape,
      .surrogateBackslash, .surrogateU, .utf8Continuation, .numberMinus, .numberDot, .numberExponentMark,
      .numberExponentSign, .literal, .failed:
      break
    }
    let error = JSONError(offset: consumed, reason: .unexpectedEnd)
    self.error = error
    mode = .failed
    return error
  }

  @inline(__always)
  static func isWhitespace(_ c: UInt8) -> Bool {
    c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09
  }

  @inline(__always)
  static func isObject(_ stack: UnsafeMutablePointer<UInt64>, _ level: Int) -> Bool {
    stack[level &>> 6] & (1 &<< UInt64(level & 63)) != 0
  }

  /// 0–15 for a hex digit, more than 15 otherwise.
  @inline(__always)
  static func hexValue(_ c: UInt8) -> UInt32 {
    let digit = UInt32(c &- 0x30)
    if digit < 10 { return digit }
    let letter = UInt32((c | 0x20) &- 0x61)
    return letter < 6 ? letter &+ 10 : 16
  }

  /// High bit set in each byte of `word` (little-endian) that ends a run of plain string
  /// bytes: `"`, `\`, a control below 0x20, or a non-ASCII byte. Only the lowest flagged byte
  /// is exact (borrows can flag bytes above it), which is all the caller uses.
  @inline(__always)
  static func stringStopMask(_ word: UInt64) -> UInt64 {
    let ones: UInt64 = 0x0101_0101_0101_0101
    let quote = word ^ (ones &* 0x22)
    let backslash = word ^ (ones &* 0x5C)
    let control = (word &- ones &* 0x20) & ~word
    let quoteZero = (quote &- ones) & ~quote
    let backslashZero = (backslash &- ones) & ~backslash
    return (control | quoteZero | backslashZero | word) & (ones &* 0x80)
  }
}
