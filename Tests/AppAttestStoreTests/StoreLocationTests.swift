import AppAttestStore
import Testing

@Suite("StoreLocation: one parser for every place that names a store")
struct StoreLocationTests {
    @Test("sqlite:PATH, PostgreSQL URLs in both spellings, and a bare path")
    func accepted() throws {
        #expect(try StoreLocation("sqlite:/var/lib/appattest.sqlite") == .sqlite(path: "/var/lib/appattest.sqlite"))
        #expect(try StoreLocation("sqlite:relative.sqlite") == .sqlite(path: "relative.sqlite"))
        #expect(try StoreLocation("appattest.sqlite") == .sqlite(path: "appattest.sqlite"))
        // A colon after a slash belongs to the path, not to a scheme.
        #expect(try StoreLocation("./data:2026.sqlite") == .sqlite(path: "./data:2026.sqlite"))
        #expect(try StoreLocation("/srv/a:b.sqlite") == .sqlite(path: "/srv/a:b.sqlite"))
        let url = "postgres://app:pw@db.internal:5432/appattest?sslmode=verify-full&sslrootcert=system"
        #expect(try StoreLocation(url) == .postgres(url: url))
        #expect(try StoreLocation("postgresql://u@h/db") == .postgres(url: "postgresql://u@h/db"))
        // The URL spelling of an absolute path, and a name with a colon made a path.
        #expect(try StoreLocation("sqlite:///var/db.sqlite") == .sqlite(path: "///var/db.sqlite"))
        #expect(try StoreLocation("sqlite:data:2026.sqlite") == .sqlite(path: "data:2026.sqlite"))
    }

    @Test("other schemes, empty values, control characters and overlong values are refused without echoing them")
    func refused() {
        for spec in [
            "", "sqlite:", "mysql://u@h/db", "postgres:u@h/db", "Postgres://u@h/db", "redis://h", "file:db.sqlite",
            "sqlite:/tmp/a\u{0}b", "/tmp/a\nb.sqlite", "postgres://u@h/db\u{1B}[2J",
            String(repeating: "a", count: 5000),
            // A leading space made a URL a file name, whose errors showed the password.
            " postgres://u:secret@h/db", "postgres://u:secret@h/db ", "sqlite: ", "sqlite://data.sqlite",
            "data:2026.sqlite", "/tmp/\u{202E}lqs.etats", "/tmp/a\u{2028}b", "./x/postgres://u:secret@h/db",
        ] {
            let error = #expect(throws: StoreLocation.Invalid.self) { try StoreLocation(spec) }
            if let error, spec.count > 8 {
                #expect(!error.description.contains(spec), "\(error.description)")
            }
            #expect(error?.description.contains("secret") == false)
        }
    }

    @Test("a log shows a SQLite path, never a PostgreSQL URL (it may carry a password)")
    func logged() throws {
        #expect(try StoreLocation("sqlite:/tmp/x.sqlite").logged == "sqlite:/tmp/x.sqlite")
        #expect(try StoreLocation("postgres://u:secret@h/db").logged == "postgres")
    }
}
