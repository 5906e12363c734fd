import CGatehouseZlib

/// Streaming gzip decompression: feed compressed pieces as they arrive, decompressed bytes
/// are appended to the caller's buffer. Stops with `outputLimitExceeded` as soon as the
/// output would pass `maxOutputBytes`, so a small bomb cannot fill memory. Concatenated gzip
/// members (RFC 1952 §2.2) are decoded one after the other.
///
/// Owns a zlib `z_stream` (about 40 KB with its window) and a 32 KB output buffer, freed in deinit; not Sendable on
/// purpose: one decoder belongs to one body on one loop.
public final class GzipDecoder {
  /// The largest total output this decoder will produce.
  public let maxOutputBytes: Int
  /// Decompressed bytes produced so far.
  public private(set) var totalOutput = 0

  /// Heap-allocated because zlib keeps a pointer back to the stream and checks it: the
  /// stream must not move.
  private let stream: UnsafeMutablePointer<z_stream>
  private var state = State.expectingMember
  /// Where zlib writes before the bytes are appended to the caller's array.
  private let scratch: UnsafeMutableBufferPointer<UInt8>

  private enum State {
    /// Before the first byte of a member (at the start, or after a member ended).
    case expectingMember
    /// Inside a member.
    case insideMember
    /// After an error; every later call throws it.
    case failed(GzipError)
  }

  /// - Parameter maxOutputBytes: the decompressed size at which decoding stops with an error.
  public init(maxOutputBytes: Int = Int.max) throws(GzipError) {
    guard maxOutputBytes >= 0 else { throw GzipError(.invalidArgument, "negative maxOutputBytes") }
    self.maxOutputBytes = maxOutputBytes
    stream = .allocate(capacity: 1)
    stream.initialize(to: z_stream())
    scratch = .allocate(capacity: 32 * 1024)
    // 15 + 16: a 32 KB window and a gzip (not zlib) wrapper.
    let status = gh_inflateInit2(stream, 15 + 16)
    guard status == Z_OK else {
      stream.deinitialize(count: 1)
      stream.deallocate()
      scratch.deallocate()
      throw GzipError(status == Z_MEM_ERROR ? .outOfMemory : .internalError, "inflateInit2 returned \(status)")
    }
  }

  deinit {
    inflateEnd(stream)
    stream.deinitialize(count: 1)
    stream.deallocate()
    scratch.deallocate()
  }

  /// Decompresses `input` (any piece of the stream), appending to `output`.
  public func decode(_ input: UnsafeRawBufferPointer, into output: inout [UInt8]) throws(GzipError) {
    if case .failed(let error) = state { throw error }
    guard let base = input.baseAddress, input.count > 0 else { return }
    var remaining = input.count
    var cursor = base
    while remaining > 0 {
      // avail_in is 32 bits: hand over at most 1 GiB at a time.
      let piece = min(remaining, 1 << 30)
      do throws(GzipError) {
        try inflate(UnsafeRawBufferPointer(start: cursor, count: piece), into: &output)
      } catch {
        state = .failed(error)
        throw error
      }
      cursor += piece
      remaining -= piece
    }
  }

  /// `decode` over an array.
  public func decode(_ input: [UInt8], into output: inout [UInt8]) throws(GzipError) {
    let result = input.withUnsafeBytes { raw in Result { () throws(GzipError) in try decode(raw, into: &output) } }
    try result.get()
  }

  /// Checks that the input ended at the end of a member. Throws `truncated` when it stopped
  /// inside one or when there was no input at all.
  public func finish() throws(GzipError) {
    switch state {
    case .failed(let error): throw error
    case .insideMember: throw GzipError(.truncated, "stream ends inside a gzip member")
    case .expectingMember:
      if stream.pointee.total_in == 0 && totalOutput == 0 { throw GzipError(.truncated, "empty gzip stream") }
    }
  }

  /// Decompresses a whole gzip body at once.
  public static func decode(_ input: [UInt8], maxOutputBytes: Int = Int.max) throws(GzipError) -> [UInt8] {
    let decoder = try GzipDecoder(maxOutputBytes: maxOutputBytes)
    var output: [UInt8] = []
    output.reserveCapacity(min(maxOutputBytes, input.count * 4))
    try decoder.decode(input, into: &output)
    try decoder.finish()
    return output
  }

  private func inflate(_ input: UnsafeRawBufferPointer, into output: inout [UInt8]) throws(GzipError) {
    // zlib never writes through next_in; the C declaration just lacks const.
    stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress!.assumingMemoryBound(to: Bytef.self))
    stream.pointee.avail_in = uInt(input.count)
    while true {
      if case .expectingMember = state {
        if stream.pointee.avail_in == 0 { return }
        state = .insideMember
      }
      // zlib writes into the scratch buffer; its output is copied to the caller's array, which
      // cannot expose uninitialized capacity (a memcpy costs far less than inflating).
      stream.pointee.next_out = scratch.baseAddress!
      stream.pointee.avail_out = uInt(scratch.count)
      let status = CGatehouseZlib.inflate(stream, Z_NO_FLUSH)
      let unused = Int(stream.pointee.avail_out)
      let produced = scratch.count - unused
      guard produced <= maxOutputBytes - totalOutput else {
        output.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<(maxOutputBytes - totalOutput)]))
        totalOutput = maxOutputBytes
        throw GzipError(.outputLimitExceeded, "more than \(maxOutputBytes) bytes")
      }
      output.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<produced]))
      totalOutput += produced
      switch status {
      case Z_STREAM_END:
        state = .expectingMember
        // More input: the next member (or garbage, which the header check then rejects).
        if stream.pointee.avail_in > 0 { inflateReset(stream) }
      case Z_OK, Z_BUF_ERROR:
        // Output room left over means zlib has taken all the input it can: wait for more.
        if unused > 0 { return }
      case Z_DATA_ERROR, Z_NEED_DICT:
        throw GzipError(.corruptData, message())
      case Z_MEM_ERROR:
        throw GzipError(.outOfMemory, message())
      default:
        throw GzipError(.internalError, "inflate returned \(status)")
      }
    }
  }

  private func message() -> String {
    guard let message = stream.pointee.msg else { return "" }
    return String(cString: message)
  }
}
