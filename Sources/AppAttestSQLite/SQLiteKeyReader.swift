#if SQLite
import AppAttest
import AppAttestStore
import Foundation
import GRDBSQLite
import Synchronization

/// Point reads of keys (``SQLiteAppAttestStore/keys(withIDs:)``: a cache miss's read, alone or with the misses read
/// with it) on SQLite connections of the store's own, beside GRDB's pool.
///
/// A fleet much larger than the service's key cache reads a key for nearly every assertion (README, “Scale”). Through
/// GRDB's pool each read took a dispatch barrier, a semaphore, a pool lookup by key path and an argument array
/// built by key path, which cost more than SQLite's own lookup; here a read takes an idle connection from a list
/// under a lock, binds the keyIds to a statement prepared once per batch size, and decodes the columns in place.
///
/// The connections only read (`PRAGMA query_only`), each statement in a transaction of its own, so a batch's rows are
/// one consistent snapshot (up to ``maximumKeys`` keys), as a read of the pool's is. They are opened when needed, at
/// most ``defaultMaximumConnections``, and kept; a connection on which SQLite failed is closed rather than kept. When
/// all are busy, or one cannot be opened, the store reads through GRDB's pool instead.
final class SQLiteKeyReader: Sendable {
    private struct State {
        var idle: [Connection] = []
        /// Connections open, idle or reading.
        var open = 0
        var closed = false
    }

    private let path: String
    private let busyTimeout: TimeInterval
    private let state = Mutex(State())
    /// Connections open at most: more than the reads a busy service runs at once (the key read batcher's one, the
    /// odd lookup of a key by the API). Each caches up to 8 MiB of pages of its own.
    static let defaultMaximumConnections = 4
    private let maximumConnections: Int
    /// The most keyIds one read binds: prepared statements for each count up to it, on each connection.
    static let maximumKeys = 64

    /// - Parameter path: the database file's absolute path.
    init(path: String, busyTimeout: TimeInterval, maximumConnections: Int = defaultMaximumConnections) {
        self.path = path
        self.busyTimeout = busyTimeout
        self.maximumConnections = maximumConnections
    }

    /// The keys among `keyIDs` that are stored (at most ``maximumKeys`` keyIds), in no particular order, with the
    /// columns asked for; nil when every connection is busy.
    func keys(_ keyIDs: [KeyID], _ columns: SQLiteAppAttestStore.KeyColumns) throws(StoreError) -> [KeyRecord]? {
        enum Take {
            case idle(Connection), new, busy, closed
        }
        let take = state.withLock { state -> Take in
            if state.closed { return .closed }
            if let connection = state.idle.popLast() { return .idle(connection) }
            guard state.open < maximumConnections else { return .busy }
            state.open += 1
            return .new
        }
        let connection: Connection
        switch take {
        case .closed: throw StoreError(.unavailable, "SQLite \(path): the store is closed")
        case .busy: return nil
        case .idle(let idle): connection = idle
        case .new:
            do { connection = try Connection(path: path, busyTimeout: busyTimeout) } catch {
                // The pool's connections may still read (too many files open, say): the caller falls back to them.
                state.withLock { $0.open -= 1 }
                return nil
            }
        }
        do {
            let records = try connection.keys(keyIDs, columns)
            giveBack(connection)
            return records
        } catch let error where error.kind == .corrupted {
            // A damaged row: the statement was reset after it, the connection is sound.
            giveBack(connection)
            throw error
        } catch {
            // SQLite failed: the connection is not trusted again (its deinit closes it).
            state.withLock { $0.open -= 1 }
            throw error
        }
    }

    private func giveBack(_ connection: Connection) {
        let dropped = state.withLock { state -> Connection? in
            guard !state.closed else {
                state.open -= 1
                return connection
            }
            state.idle.append(connection)
            return nil
        }
        withExtendedLifetime(dropped) {}
    }

    /// Closes the idle connections; later reads fail with `unavailable`, and a read in flight closes its connection
    /// when it ends.
    func close() {
        let idle = state.withLock { state -> [Connection] in
            state.closed = true
            state.open -= state.idle.count
            defer { state.idle = [] }
            return state.idle
        }
        withExtendedLifetime(idle) {}
    }
}

/// One read-only connection and its prepared statements, per batch size and set of columns. Used by
/// one thread at a time: the reader hands it out from its idle list and takes it back, so `@unchecked Sendable`
/// holds.
private final class Connection: @unchecked Sendable {
    private let handle: OpaquePointer
    private let path: String
    /// By batch size and columns.
    private var statements: [Statement: OpaquePointer] = [:]

    private struct Statement: Hashable {
        let count: Int
        let columns: SQLiteAppAttestStore.KeyColumns
    }

    init(path: String, busyTimeout: TimeInterval) throws(StoreError) {
        // Its own page cache, as each of the pool's connections has (8 MiB at most), and nothing written through it.
        handle = try SQLiteAppAttestStore.openConnection(
            path: path, busyTimeout: busyTimeout,
            setup: "PRAGMA query_only = 1; PRAGMA cache_size = -\(SQLiteAppAttestStore.pageCacheKiB)")
        self.path = path
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    private func failure(_ what: String) -> StoreError {
        StoreError(.unavailable, "SQLite \(path): \(what): \(String(cString: sqlite3_errmsg(handle)))")
    }

    /// The statement that reads `count` keys' `columns`, prepared at its first use.
    private func statement(_ count: Int, _ columns: SQLiteAppAttestStore.KeyColumns) throws(StoreError) -> OpaquePointer
    {
        let slot = Statement(count: count, columns: columns)
        if let statement = statements[slot] { return statement }
        let sql = SQLiteAppAttestStore.selectKeys(count: count, columns)
        var statement: OpaquePointer?
        guard sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil) == SQLITE_OK,
            let statement
        else { throw failure("prepare") }
        statements[slot] = statement
        return statement
    }

    func keys(_ keyIDs: [KeyID], _ columns: SQLiteAppAttestStore.KeyColumns) throws(StoreError) -> [KeyRecord] {
        let statement = try statement(keyIDs.count, columns)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, keyID) in keyIDs.enumerated() {
            let bound = keyID.rawValue.withUnsafeBytes { bytes in
                sqlite3_bind_blob(statement, Int32(index + 1), bytes.baseAddress, Int32(bytes.count), transient)
            }
            guard bound == SQLITE_OK else { throw failure("bind") }
        }
        var records: [KeyRecord] = []
        records.reserveCapacity(keyIDs.count)
        while true {
            switch sqlite3_step(statement) {
            case SQLITE_ROW: records.append(try SQLiteAppAttestStore.keyRecord(statement))
            case SQLITE_DONE: return records
            default: throw failure("read")
            }
        }
    }
}

extension SQLiteAppAttestStore {
    /// A busy timeout as `sqlite3_busy_timeout` takes it: whole milliseconds, within 0 and a day.
    static func busyTimeoutMilliseconds(_ seconds: TimeInterval) -> Int32 {
        Int32(clamping: Int(min(max(seconds, 0), 86_400) * 1000))
    }

    /// A connection of the store's own beside GRDB's pool (the key reader's, the checkpointer's), with `setup` run on
    /// it; closed again if that fails.
    static func openConnection(path: String, busyTimeout: TimeInterval, setup: String) throws(StoreError)
        -> OpaquePointer
    {
        var handle: OpaquePointer?
        let opened = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard opened == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "code \(opened)"
            sqlite3_close_v2(handle)
            throw StoreError(.unavailable, "SQLite \(path): \(message)")
        }
        sqlite3_busy_timeout(handle, busyTimeoutMilliseconds(busyTimeout))
        guard sqlite3_exec(handle, setup, nil, nil, nil) == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(handle))
            sqlite3_close_v2(handle)
            throw StoreError(.unavailable, "SQLite \(path): \(message)")
        }
        return handle
    }

    /// The current row of ``selectKeys`` on a stepped statement (the reader's, or a GRDB statement's
    /// `sqliteStatement`), its columns read in place: one decoder for every read of a key, whichever connection ran
    /// it. A column of another type than the schema's, or NULL where the schema has NOT NULL, is `corrupted`.
    static func keyRecord(_ row: OpaquePointer) throws(StoreError) -> KeyRecord {
        func blob(_ column: Int32) throws(StoreError) -> UnsafeRawBufferPointer {
            guard sqlite3_column_type(row, column) == SQLITE_BLOB else { throw corrupted(column) }
            let start = sqlite3_column_blob(row, column)
            return UnsafeRawBufferPointer(
                start: start, count: start == nil ? 0 : Int(sqlite3_column_bytes(row, column)))
        }
        func text(_ column: Int32) throws(StoreError) -> String? {
            switch sqlite3_column_type(row, column) {
            case SQLITE_NULL: return nil
            case SQLITE_TEXT:
                guard let start = sqlite3_column_text(row, column) else { return "" }
                let count = Int(sqlite3_column_bytes(row, column))
                // Whole, NUL bytes included: a text is not cut at its first NUL, as a C string would be.
                return String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)
            default: throw corrupted(column)
            }
        }
        func integer(_ column: Int32) throws(StoreError) -> Int64? {
            switch sqlite3_column_type(row, column) {
            case SQLITE_NULL: return nil
            case SQLITE_INTEGER: return sqlite3_column_int64(row, column)
            default: throw corrupted(column)
            }
        }
        func real(_ column: Int32) throws(StoreError) -> Double? {
            switch sqlite3_column_type(row, column) {
            case SQLITE_NULL: return nil
            case SQLITE_FLOAT, SQLITE_INTEGER: return sqlite3_column_double(row, column)
            default: throw corrupted(column)
            }
        }
        // Each blob is copied at once: its pointer is SQLite's, valid only until the statement steps again.
        let keyID = Array(try blob(0))
        let userID = try text(1)
        guard let appID = try text(2) else { throw corrupted(2) }
        guard let environment = try text(3) else { throw corrupted(3) }
        let publicKey = Array(try blob(4))
        guard let counter = try integer(5) else { throw corrupted(5) }
        let receipt = Array(try blob(6))
        let riskMetric = try integer(7).map { Int(truncatingIfNeeded: $0) }
        guard let createdAt = try real(8) else { throw corrupted(8) }
        guard let receiptUpdatedAt = try real(9) else { throw corrupted(9) }
        return try KeyRecord.decoding(
            keyID: keyID, userID: userID, appID: appID, environment: environment, publicKey: publicKey,
            counter: counter, receipt: receipt, riskMetric: riskMetric, createdAt: createdAt,
            receiptUpdatedAt: receiptUpdatedAt, revokedAt: try real(10))
    }

    private static func corrupted(_ column: Int32) -> StoreError {
        StoreError(.corrupted, "a stored key's column \(column) is not of its schema's type")
    }
}

/// SQLite copies the bound bytes (`SQLITE_TRANSIENT`).
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
#endif  // SQLite
