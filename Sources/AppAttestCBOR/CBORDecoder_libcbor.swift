internal import CAppAttestCBOR

/// Decodes untrusted CBOR with libcbor's streaming decoder, behind hard limits (CONTRIBUTING.md, “OpenSSL and
/// libcbor”).
///
/// `cbor_load` is never used: it trusts declared lengths and allocates for them. `cbor_stream_decode` reports
/// one item head at a time and never allocates; this type builds `CBORValue`s from those events and checks,
/// before anything is reserved, that a container's declared element count fits in the bytes that remain.
package struct CBORDecoder: Sendable {
    /// The largest input accepted, in bytes.
    package var maximumInputSize: Int
    /// The deepest nesting of arrays, maps and tags accepted.
    package var maximumDepth: Int

    package init(maximumInputSize: Int = 64 * 1024, maximumDepth: Int = 16) {
        self.maximumInputSize = maximumInputSize
        self.maximumDepth = maximumDepth
    }

    /// Decodes exactly one item that spans all of `bytes`.
    package func decode(_ bytes: [UInt8]) throws(CBORError) -> CBORValue {
        let (value, end) = try decodePrefix(bytes, from: 0)
        guard end == bytes.count else { throw .trailingBytes(count: bytes.count - end) }
        return value
    }

    /// Decodes one item that starts at `offset`; returns it and the offset just past it.
    package func decodePrefix(_ bytes: [UInt8], from offset: Int) throws(CBORError) -> (CBORValue, Int) {
        guard bytes.count <= maximumInputSize else {
            throw .inputTooLarge(size: bytes.count, limit: maximumInputSize)
        }
        guard offset >= 0, offset < bytes.count else { throw .truncated }
        let builder = Builder(maximumDepth: maximumDepth)
        let context = Unmanaged.passUnretained(builder).toOpaque()
        let outcome: Result<Int, CBORError> = bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return .failure(.truncated) }
            var position = offset
            // Every event consumes at least one byte, so this loop ends within `bytes.count` turns.
            while builder.result == nil {
                let remaining = buffer.count - position
                guard remaining > 0 else { return .failure(.truncated) }
                builder.remaining = remaining
                builder.events = 0
                let step = withUnsafePointer(to: Callbacks.table) {
                    cbor_stream_decode(base + position, remaining, $0, context)
                }
                switch step.status {
                case CBOR_DECODER_FINISHED: break
                case CBOR_DECODER_NEDATA: return .failure(.truncated)
                default: return .failure(.malformed)
                }
                if let error = builder.error { return .failure(error) }
                // A head that libcbor consumed without reporting it would vanish from the value: refuse it.
                guard step.read > 0, builder.events == 1 else { return .failure(.malformed) }
                position += step.read
            }
            return .success(position)
        }
        switch outcome {
        case .success(let end):
            guard let value = builder.result else { throw .malformed }
            return (value, end)
        case .failure(let error):
            throw error
        }
    }
}

/// Collects streaming events into values. Lives for one decode call on one thread.
///
/// Containers are appended to in place (`stack[top].items.append`), so building an item of n elements costs
/// O(n), never a copy of the partial array per element.
private final class Builder {
    enum Kind {
        case array
        case map
        case tag(UInt64)
    }

    struct Frame {
        var kind: Kind
        /// Items still to come before the container is complete.
        var expected: Int
        var items: [CBORValue]
    }

    let maximumDepth: Int
    var stack: [Frame] = []
    var result: CBORValue?
    var error: CBORError?
    /// Bytes from the current event's head to the end of the input.
    var remaining = 0
    /// Callbacks seen during the current `cbor_stream_decode` call (exactly one is expected).
    var events = 0

    init(maximumDepth: Int) { self.maximumDepth = maximumDepth }

    func fail(_ error: CBORError) {
        if self.error == nil { self.error = error }
    }

    /// Adds a finished value to the innermost open container, closing containers that become complete.
    func emit(_ value: CBORValue) {
        guard error == nil else { return }
        var value = value
        while !stack.isEmpty {
            let top = stack.count - 1
            stack[top].items.append(value)
            guard stack[top].items.count == stack[top].expected else { return }
            let frame = stack.removeLast()
            switch frame.kind {
            case .tag(let tag):
                value = .tagged(tag, frame.items[0])
            case .array:
                value = .array(frame.items)
            case .map:
                var entries: [CBORMapEntry] = []
                entries.reserveCapacity(frame.items.count / 2)
                var seen = Set<CBORValue>()
                for index in stride(from: 0, to: frame.items.count, by: 2) {
                    switch frame.items[index] {
                    case .unsignedInteger, .negativeInteger, .textString, .byteString: break
                    default: return fail(.unsupportedMapKey)
                    }
                    guard seen.insert(frame.items[index]).inserted else { return fail(.duplicateMapKey) }
                    entries.append(CBORMapEntry(key: frame.items[index], value: frame.items[index + 1]))
                }
                value = .map(entries)
            }
        }
        result = value
    }

    /// Opens a container of `elements` items (pairs, for a map).
    func open(_ kind: Kind, elements: Int) {
        guard error == nil else { return }
        // libcbor reports counts as size_t, which Swift sees as Int: a count of 2^63 or more arrives negative.
        // Each item takes at least one byte after the head: a larger count is a lie about the input, refused
        // before anything is reserved for it.
        guard elements >= 0, elements < remaining else { return fail(.declaredLengthExceedsInput) }
        guard stack.count < maximumDepth else { return fail(.nestingTooDeep(limit: maximumDepth)) }
        var items = elements
        switch kind {
        case .array:
            if elements == 0 { return emit(.array([])) }
        case .map:
            if elements == 0 { return emit(.map([])) }
            guard elements <= (remaining - 1) / 2 else { return fail(.declaredLengthExceedsInput) }
            items = elements * 2
        case .tag:
            items = 1
        }
        var storage: [CBORValue] = []
        storage.reserveCapacity(items)
        stack.append(Frame(kind: kind, expected: items, items: storage))
    }

    static func from(_ context: UnsafeMutableRawPointer?) -> Builder {
        let builder = Unmanaged<Builder>.fromOpaque(context!).takeUnretainedValue()
        builder.events += 1
        return builder
    }
}

/// The libcbor callback table: every event funnels into the builder named by the context pointer.
private enum Callbacks {
    static let table: cbor_callbacks = {
        var table = cbor_empty_callbacks
        table.uint8 = { ctx, v in Builder.from(ctx).emit(.unsignedInteger(UInt64(v))) }
        table.uint16 = { ctx, v in Builder.from(ctx).emit(.unsignedInteger(UInt64(v))) }
        table.uint32 = { ctx, v in Builder.from(ctx).emit(.unsignedInteger(UInt64(v))) }
        table.uint64 = { ctx, v in Builder.from(ctx).emit(.unsignedInteger(v)) }
        table.negint8 = { ctx, v in Builder.from(ctx).emit(.negativeInteger(UInt64(v))) }
        table.negint16 = { ctx, v in Builder.from(ctx).emit(.negativeInteger(UInt64(v))) }
        table.negint32 = { ctx, v in Builder.from(ctx).emit(.negativeInteger(UInt64(v))) }
        table.negint64 = { ctx, v in Builder.from(ctx).emit(.negativeInteger(v)) }
        table.byte_string = { ctx, data, length in
            let bytes = length == 0 ? [] : Array(UnsafeBufferPointer(start: data, count: length))
            Builder.from(ctx).emit(.byteString(bytes))
        }
        table.string = { ctx, data, length in
            let builder = Builder.from(ctx)
            let bytes = UnsafeBufferPointer(start: data, count: length)
            guard let text = length == 0 ? "" : String(validating: bytes, as: UTF8.self) else {
                return builder.fail(.invalidUTF8)
            }
            builder.emit(.textString(text))
        }
        table.array_start = { ctx, count in Builder.from(ctx).open(.array, elements: count) }
        table.map_start = { ctx, count in Builder.from(ctx).open(.map, elements: count) }
        table.tag = { ctx, tag in Builder.from(ctx).open(.tag(tag), elements: 1) }
        table.byte_string_start = { ctx in Builder.from(ctx).fail(.indefiniteLength) }
        table.string_start = { ctx in Builder.from(ctx).fail(.indefiniteLength) }
        table.indef_array_start = { ctx in Builder.from(ctx).fail(.indefiniteLength) }
        table.indef_map_start = { ctx in Builder.from(ctx).fail(.indefiniteLength) }
        table.indef_break = { ctx in Builder.from(ctx).fail(.indefiniteLength) }
        table.float2 = { ctx, v in Builder.from(ctx).emit(.float(Double(v))) }
        table.float4 = { ctx, v in Builder.from(ctx).emit(.float(Double(v))) }
        table.float8 = { ctx, v in Builder.from(ctx).emit(.float(v)) }
        table.boolean = { ctx, v in Builder.from(ctx).emit(.boolean(v)) }
        table.null = { ctx in Builder.from(ctx).emit(.null) }
        table.undefined = { ctx in Builder.from(ctx).emit(.undefined) }
        return table
    }()
}
