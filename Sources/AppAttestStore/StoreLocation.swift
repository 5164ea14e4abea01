/// Where a store lives, as a person writes it: `appattest serve`'s `database` (and `APPATTEST_DATABASE`),
/// `appattest-dev load prepare --seed`, the store worker of the tests. One parser for all of them, so that the same
/// string means the same store everywhere (README, “Configuration”).
///
/// - `sqlite:PATH`: a SQLite file;
/// - `postgres://…` or `postgresql://…`: a PostgreSQL URL, as libpq spells it;
/// - a bare path without a scheme: a SQLite file, as `sqlite:` would name it.
///
/// Anything else with a scheme (`mysql://…`, `postgres:host`) is refused rather than taken for a file name.
package enum StoreLocation: Sendable, Hashable {
    case sqlite(path: String)
    case postgres(url: String)

    /// A location that cannot be used; its description never repeats the value (it may hold a password, or
    /// characters that a terminal would act on).
    package struct Invalid: Error, Sendable, CustomStringConvertible {
        package let description: String
    }

    /// The longest value taken: far beyond any path or URL, short of anything a terminal or a log would suffer from.
    static let maximumLength = 4096

    /// Parses `spec`.
    /// - Throws: ``Invalid``, saying what is wrong without repeating the value.
    package init(_ spec: String) throws(Invalid) {
        guard !spec.isEmpty else { throw Invalid(description: "is empty: give sqlite:PATH or a postgres:// URL") }
        guard spec.utf8.count <= Self.maximumLength else {
            throw Invalid(description: "is longer than \(Self.maximumLength) bytes")
        }
        // A NUL would cut the path where SQLite and libpq read it as a C string; other control characters are no
        // part of a real path or URL.
        guard !spec.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw Invalid(description: "contains a control character")
        }
        if spec.hasPrefix("postgres://") || spec.hasPrefix("postgresql://") {
            self = .postgres(url: spec)
            return
        }
        if spec.hasPrefix("sqlite:") {
            let path = String(spec.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw Invalid(description: "sqlite: needs a path (sqlite:PATH)") }
            self = .sqlite(path: path)
            return
        }
        guard Self.scheme(of: spec) == nil else {
            throw Invalid(
                description: "names a store this package does not have: give sqlite:PATH or a postgres:// URL")
        }
        self = .sqlite(path: spec)
    }

    /// The location as a log may show it: a SQLite file's path, and only the word `postgres` for a URL (which may
    /// carry a password).
    package var logged: String {
        switch self {
        case .sqlite(let path): "sqlite:\(path)"
        case .postgres: "postgres"
        }
    }

    /// The scheme of a value that starts with one (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`, then
    /// `:`); nil for a path. A colon after a slash belongs to a path (`./a:b`), not to a scheme.
    private static func scheme(of spec: String) -> Substring? {
        guard let colon = spec.firstIndex(of: ":") else { return nil }
        let scheme = spec[..<colon]
        guard let first = scheme.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic,
            scheme.unicodeScalars.allSatisfy({
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "+-.".unicodeScalars.contains($0))
            })
        else { return nil }
        return scheme
    }
}
