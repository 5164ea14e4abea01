internal import CAppAttestCBOR

/// Decodes untrusted CBOR with libcbor's streaming decoder, behind hard limits (SPEC §9, STYLE rule 5).
///
/// `cbor_load` is never used: it trusts declared lengths and allocates for them. `cbor_stream_decode` reports
/// one item head at a time and never allocates; this type builds `CBORValue`s from those events and checks,
/// before anything is reserved, that a container's declared element count fits in the bytes that remain.
public struct CBORDecoder: Sendable {
    /// The largest input accepted, in bytes.
    public var maximumInputSize: Int
    /// The deepest nesting of arrays, maps and tags accepted.
    public var maximumDepth: Int

    public init(maximumInputSize: Int = 64 * 1024, maximumDepth: Int = 16) {
        self.maximumInputSize = maximumInputSize
        self.maximumDepth = maximumDepth
    }

    /// Decodes exactly one item that spans all of `bytes`.
    public func decode(_ bytes: [UInt8]) throws(CBORError) -> CBORValue {
        let (value, end) = try decodePrefix(bytes, from: 0)
        guard end == bytes.count else { throw .trailingBytes(count: bytes.count - end) }
        return value
    }

    /// Decodes one item that starts at `offset`; returns it and the offset just past it.
    public func decodePrefix(_ bytes: [UInt8], from offset: Int) throws(CBORError) -> (CBORValue, Int) {
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
private final class Builder {
    enum Container {
        case array(expected: Int, items: [CBORValue])
        case map(expected: Int, items: [CBORValue])
        case tag(UInt64)
    }

    let maximumDepth: Int
    var stack: [Container] = []
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
        while true {
            guard let top = stack.popLast() else {
                result = value
                return
            }
            switch top {
            case .tag(let tag):
                value = .tagged(tag, value)
                continue
            case .array(let expected, var items):
                items.append(value)
                if items.count < expected {
                    stack.append(.array(expected: expected, items: items))
                    return
                }
                value = .array(items)
            case .map(let expected, var items):
                items.append(value)
                if items.count < expected * 2 {
                    stack.append(.map(expected: expected, items: items))
                    return
                }
                var entries: [CBORMapEntry] = []
                entries.reserveCapacity(expected)
                var seen = Set<CBORValue>()
                for index in stride(from: 0, to: items.count, by: 2) {
                    guard seen.insert(items[index]).inserted else { return fail(.duplicateMapKey) }
                    entries.append(CBORMapEntry(key: items[index], value: items[index + 1]))
                }
                value = .map(entries)
            }
        }
    }

    func open(_ container: Container, elements: Int) {
        guard error == nil else { return }
        // Each element takes at least one byte after the head: a larger count is a lie about the input.
        guard elements < remaining else { return fail(.declaredLengthExceedsInput) }
        guard stack.count < maximumDepth else { return fail(.nestingTooDeep(limit: maximumDepth)) }
        switch container {
        case .array:
            if elements == 0 { return emit(.array([])) }
            var items: [CBORValue] = []
            items.reserveCapacity(elements)
            stack.append(.array(expected: elements, items: items))
        case .map:
            if elements == 0 { return emit(.map([])) }
            guard elements <= remaining / 2 else { return fail(.declaredLengthExceedsInput) }
            var items: [CBORValue] = []
            items.reserveCapacity(elements * 2)
            stack.append(.map(expected: elements, items: items))
        case .tag:
            stack.append(container)
        }
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
        table.array_start = { ctx, count in Builder.from(ctx).open(.array(expected: 0, items: []), elements: count) }
        table.map_start = { ctx, count in Builder.from(ctx).open(.map(expected: 0, items: []), elements: count) }
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
