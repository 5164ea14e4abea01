#if Service
import Foundation
public import Logging
import Synchronization

/// One JSON object per line on standard error (`appattest serve --log-format json`), for log collectors:
/// `{"time", "level", "label", "message", "source", …metadata}`. Metadata keys never clash with these: they are
/// written under their own names only when those are free, else prefixed with `meta.`.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private static let output = Mutex(())

    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        var object: [String: Any] = [
            "time": ISO8601DateFormatter().string(from: Date()), "level": event.level.rawValue, "label": label,
            "message": "\(event.message)", "source": event.source,
        ]
        for (key, value) in merged {
            object[object[key] == nil ? key : "meta.\(key)"] = Self.json(value)
        }
        guard var line = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        line.append(0x0A)
        Self.output.withLock { _ in FileHandle.standardError.write(line) }
    }

    static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let string): return string
        case .stringConvertible(let convertible): return convertible.description
        case .array(let array): return array.map(json)
        case .dictionary(let dictionary): return dictionary.mapValues(json)
        }
    }
}
#endif  // Service
