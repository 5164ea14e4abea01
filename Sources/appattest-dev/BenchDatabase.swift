#if Service
import AppAttestPostgres
import AppAttestSQLite
import AppAttestStore
import ArgumentParser
import Foundation

/// The database a store benchmark runs on (`bench store`, `bench keys`): a SQLite file given as `sqlite:PATH`, a
/// temporary SQLite file of the benchmark's own (without `--database`; removed with its log by
/// ``removeTemporary()``), or a PostgreSQL URL (by default `APPATTEST_POSTGRES_URL`).
struct BenchDatabase {
    let location: StoreLocation
    private let temporary: String?

    /// - Parameters:
    ///   - backend: `sqlite` or `postgres`.
    ///   - database: the `--database` option.
    ///   - newFileOnly: whether a SQLite file given must not exist yet (a benchmark that adds keys to it must not add
    ///     them to a database in use).
    init(backend: String, database: String?, newFileOnly: Bool) throws {
        switch backend {
        case "sqlite":
            guard let database else {
                let path = FileManager.default.temporaryDirectory.appendingPathComponent(
                    "appattest-bench-\(UUID().uuidString).sqlite"
                ).path
                location = .sqlite(path: path)
                temporary = path
                return
            }
            guard case .sqlite(let path) = try StoreLocation(database) else {
                throw ValidationError("--backend sqlite needs --database sqlite:PATH")
            }
            if newFileOnly, FileManager.default.fileExists(atPath: path) {
                throw ValidationError("--database names a file that exists: give a new one")
            }
            location = .sqlite(path: path)
        case "postgres":
            guard let spec = database ?? ProcessInfo.processInfo.environment["APPATTEST_POSTGRES_URL"] else {
                throw ValidationError("give --database postgres://… or set APPATTEST_POSTGRES_URL")
            }
            location = try StoreLocation(spec)
            guard case .postgres = location else { throw ValidationError("--backend postgres needs a postgres:// URL") }
        default: throw ValidationError("--backend is sqlite or postgres")
        }
        temporary = nil
    }

    /// Whether the file is the benchmark's own, removed at its end.
    var isTemporary: Bool { temporary != nil }

    /// Removes the temporary file and its log, if the benchmark made one.
    func removeTemporary() {
        guard let temporary else { return }
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: temporary + suffix) }
    }
}

extension StoreLocation {
    /// The store at this location, opened (and migrated).
    func open() async throws -> any AppAttestStore {
        switch self {
        case .sqlite(let path): try SQLiteAppAttestStore(path: path)
        case .postgres(let url): try await PostgresAppAttestStore.connect(url: url)
        }
    }
}
#endif  // Service
