/// Where a store lives, as a person writes it: `appattest serve`'s `database` (and `APPATTEST_DATABASE`),
/// `appattest-dev load prepare --seed`, the store worker of the tests. One parser for all of them, so that the same
/// string means the same store everywhere (README, “Configuration”).
///
/// - `sqlite:PATH`: a SQLite file;
/// - `postgres://…` or `postgresql://…`: a PostgreSQL URL, as libpq spells it;
/// - a bare path without a scheme: a SQLite file, as `sqlite:` would name it.
///
/// Anything else with a scheme (`mysql://…`, `postgres:host`, and so a bare name with a colon before any slash, such as
/// `data:2026.sqlite`, which `sqlite:` or `./` makes a path) is refused rather than taken for a file name, as are
/// `sqlite://name` (a host, not a path), spaces around the value, and control or invisible characters.
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
        // A NUL would cut the path where SQLite and libpq read it as a C string; other control characters, and the
        // invisible ones (bidirectional overrides, line and paragraph separators), are no part of a real path or URL
        // and would reach logs.
        guard
            !spec.unicodeScalars.contains(where: {
                [.control, .format, .lineSeparator, .paragraphSeparator].contains($0.properties.generalCategory)
            })
        else { throw Invalid(description: "contains a control or invisible character") }
        // A space before a URL would make it a file name, and the file's errors would show the URL's password.
        guard let first = spec.unicodeScalars.first, let last = spec.unicodeScalars.last,
            !first.properties.isWhitespace, !last.properties.isWhitespace
        else { throw Invalid(description: "begins or ends with a space") }
        if spec.hasPrefix("postgres://") || spec.hasPrefix("postgresql://") {
            self = .postgres(url: spec)
            return
        }
        if spec.hasPrefix("sqlite:") {
            let path = String(spec.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw Invalid(description: "sqlite: needs a path (sqlite:PATH)") }
            // `sqlite://name` reads as a URL whose host is `name`; as a path it would be `//name`, at the root.
            // `sqlite:///absolute/path` is the URL spelling of an absolute path, and is one.
            guard !path.hasPrefix("//") || path.hasPrefix("///") else {
                throw Invalid(description: "sqlite:// names no path: write sqlite:PATH, or sqlite:///ABSOLUTE/PATH")
            }
            self = .sqlite(path: path)
            return
        }
        guard Self.scheme(of: spec) == nil, !spec.contains("://") else {
            throw Invalid(
                description: """
                    names a store this package does not have: give sqlite:PATH or a postgres:// URL (a file whose \
                    name has a colon before any slash: sqlite:NAME or ./NAME)
                    """)
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
