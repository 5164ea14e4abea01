#if SQLite
import AppAttest
import AppAttestLifecycle
import AppAttestSQLite
import AppAttestStore
import Foundation
import GRDB
import GRDBSQLite
import Logging
import Synchronization
import Testing

/// The SQLite store's point reads of keys (a cache miss's read), which run on connections of their own beside GRDB's
/// pool: what they return, what another connection's writes do to them, and hostile rows.
@Suite("SQLite key reads")
struct SQLiteKeyReadTests {
    /// A store whose key reads go through the reader's connections (4, the default) or all through GRDB's pool (0).
    private static func withStore(
        connections: Int = 4, checkpoints: Bool = true, restartPages: Int? = nil,
        logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
        _ body: (SQLiteAppAttestStore, String) async throws -> Void
    ) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyreads-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("store.sqlite").path
        let store = try SQLiteAppAttestStore(
            path: path, busyTimeout: 10, keyReadConnections: connections, checkpoints: checkpoints,
            checkpointRestartPages: restartPages, logger: logger)
        try await body(store, path)
        await store.close()
    }

    @Test(
        "a read of more keys than one statement binds returns each stored key once, as stored",
        arguments: [4, 0])
    func manyKeys(connections: Int) async throws {
        try await Self.withStore(connections: connections) { store, _ in
            var stored: [KeyID: KeyRecord] = [:]
            let created = Date(timeIntervalSince1970: 1_700_000_000)
            for index in 0..<150 {
                let record = TestKeys.record(
                    index, counter: UInt32(index), userID: index.isMultiple(of: 2) ? "user-\(index)" : nil,
                    receipt: Array(repeating: UInt8(index % 256), count: index * 40),
                    riskMetric: index.isMultiple(of: 3) ? index : nil, createdAt: created)
                _ = try await store.insertKey(record, maximumKeysPerUser: nil)
                stored[record.keyID] = record
            }
            // 150 stored keys and 30 unknown ones, in one call: three statements' worth.
            let unknown = (150..<180).map { TestKeys.publicKey($0).keyID }
            let read = try await store.keys(withIDs: Array(stored.keys) + unknown)
            #expect(read.count == 150)
            #expect(Set(read.map(\.keyID)) == Set(stored.keys))
            for record in read {
                let expected = try #require(stored[record.keyID])
                #expect(record.key == expected.key)
                #expect(record.userID == expected.userID)
                #expect(record.receipt == expected.receipt)
                #expect(record.riskMetric == expected.riskMetric)
                #expect(record.createdAt == created)
                #expect(record.revokedAt == nil)
            }
            #expect(try await store.keys(withIDs: []).isEmpty)
            #expect(try await store.key(unknown[0]) == nil)
            // The assertion path's read: the same records, each with an empty receipt.
            let lean = try await store.keysWithoutReceipts(withIDs: Array(stored.keys) + unknown)
            #expect(lean.count == 150)
            for record in lean {
                var expected = try #require(stored[record.keyID])
                expected.receipt = []
                #expect(record == expected)
            }
            // A cache miss's read: the unchanging columns alone, counter 0 and no revocation whatever is stored (one
            // key revoked to show it).
            #expect(try await store.revokeKey(TestKeys.publicKey(3).keyID, at: created))
            #expect(try await store.keysWithoutReceipts(withIDs: [TestKeys.publicKey(3).keyID]).first?.revokedAt != nil)
            let unchanging = try await store.keysWithoutCounters(withIDs: Array(stored.keys) + unknown)
            #expect(unchanging.count == 150)
            for record in unchanging {
                var expected = try #require(stored[record.keyID])
                expected.receipt = []
                expected.key.counter = 0
                #expect(record == expected)
            }
        }
    }

    @Test("a read without receipts uses the index that holds every other column, never a key's row")
    func readsWithoutReceiptsUseTheIndex() async throws {
        try await Self.withStore { store, path in
            for index in 0..<20 {
                let record = TestKeys.record(index, receipt: Array(repeating: 7, count: 3_800))
                _ = try await store.insertKey(record, maximumKeysPerUser: nil)
            }
            let pool = try DatabaseQueue(path: path)
            func plan(_ sql: String) throws -> String {
                try pool.read { db in
                    try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN \(sql)", arguments: [Data(), Data(), Data()])
                        .map { $0["detail"] as String }.joined(separator: "; ")
                }
            }
            let lean = try plan(SQLiteAppAttestStore.selectKeys(count: 3, .withoutReceipt))
            #expect(lean.contains("SEARCH keys USING COVERING INDEX keys_without_receipts"), "\(lean)")
            // Without the counters, the index alone: key_counters is not read.
            let unchanging = try plan(SQLiteAppAttestStore.selectKeys(count: 3, .unchanging))
            #expect(unchanging == "SEARCH keys USING COVERING INDEX keys_without_receipts (key_id=?)", "\(unchanging)")
            // With receipts, the row is read: the index alone would not do.
            let whole = try plan(SQLiteAppAttestStore.selectKeys(count: 3, .whole))
            #expect(!whole.contains("COVERING INDEX keys_without_receipts"), "\(whole)")
            try pool.close()
        }
    }

    @Test("a database whose index of keys without receipts was dropped still reads them, whole, the receipts dropped")
    func droppedIndex() async throws {
        try await Self.withStore { store, path in
            var expected: [KeyID: KeyRecord] = [:]
            for index in 0..<10 {
                let record = TestKeys.record(index, receipt: Array(repeating: UInt8(index), count: 100))
                _ = try await store.insertKey(record, maximumKeysPerUser: nil)
                let stored = try #require(try await store.key(record.keyID))
                expected[record.keyID] = stored
            }
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in try db.execute(sql: "DROP INDEX keys_without_receipts") }
            // The statement that names the index no longer prepares: reading it would fail every miss.
            await #expect(throws: (any Error).self) {
                try await queue.read { db in
                    _ = try Row.fetchAll(
                        db, sql: SQLiteAppAttestStore.selectKeys(count: 1, .withoutReceipt), arguments: [Data()])
                }
            }
            try queue.close()
            let reopened = try SQLiteAppAttestStore(path: path)
            let read = try await reopened.keysWithoutReceipts(withIDs: Array(expected.keys))
            #expect(read.count == 10)
            for record in read {
                #expect(record == (try #require(expected[record.keyID])).withoutReceipt)
            }
            // And so does a miss's read without counters: whole, with them.
            let unchanging = try await reopened.keysWithoutCounters(withIDs: Array(expected.keys))
            #expect(Set(unchanging) == Set(read))
            await reopened.close()
        }
    }

    @Test("reads from more tasks than the reader has connections all answer", arguments: [1, 4])
    func concurrentReads(connections: Int) async throws {
        try await Self.withStore(connections: connections) { store, _ in
            var stored: [KeyID: KeyRecord] = [:]
            for index in 0..<40 {
                let record = TestKeys.record(index, receipt: [UInt8(index)])
                _ = try await store.insertKey(record, maximumKeysPerUser: nil)
                stored[record.keyID] = record
            }
            let ids = Array(stored.keys)
            let expected = stored
            let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
                for task in 0..<32 {
                    group.addTask {
                        var wrong = 0
                        for round in 0..<20 {
                            let wanted = (0..<(1 + (task + round) % 8)).map {
                                ids[(task * 7 + round + $0 * 5) % ids.count]
                            }
                            let read = try await store.keys(withIDs: wanted)
                            if Set(read.map(\.keyID)) != Set(wanted) { wrong += 1 }
                            for record in read where record.receipt != expected[record.keyID]?.receipt { wrong += 1 }
                        }
                        return wrong
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(wrong == 0)
        }
    }

    @Test("a revocation and a counter stored through another connection show at the next read")
    func otherConnectionsWrites() async throws {
        try await Self.withStore { store, path in
            let record = TestKeys.record(0)
            _ = try await store.insertKey(record, maximumKeysPerUser: nil)
            // Read once, so that the connection that read is idle, with its statement prepared, when the other writes.
            #expect(try await store.key(record.keyID)?.revokedAt == nil)
            let other = try SQLiteAppAttestStore(path: path)
            let acceptance = AssertionAcceptance(
                keyID: record.keyID, counter: 7, counterPolicy: .strictlyIncreasing, challenge: nil)
            #expect(try await other.acceptAssertion(acceptance) == .accepted(highestCounter: 7))
            #expect(try await other.revokeKey(record.keyID, at: Date(), reason: "test"))
            await other.close()
            let after = try #require(try await store.key(record.keyID))
            #expect(after.key.counter == 7)
            #expect(after.revokedAt != nil)
        }
    }

    @Test(
        "a row whose columns are not of the schema's types is refused as corrupted, and other keys still read",
        arguments: [4, 0])
    func hostileRows(connections: Int) async throws {
        try await Self.withStore(connections: connections) { store, path in
            let records = (0..<5).map { TestKeys.record($0, userID: "user") }
            for record in records { _ = try await store.insertKey(record, maximumKeysPerUser: nil) }
            // Written behind the store's back, as a damaged or hand-edited file would be: SQLite's columns take any
            // type unless the table is STRICT (a number in a TEXT column is stored as text, a blob stays a blob). One
            // damage per row, so that each check is reached.
            let damages = [
                "receipt = 'not a blob'", "user_id = x'00'", "public_key = x'04'", "created_at = 'yesterday'",
            ]
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                for (damage, record) in zip(damages, records) {
                    try db.execute(
                        sql: "UPDATE keys SET \(damage) WHERE key_id = ?", arguments: [Data(record.keyID.rawValue)])
                }
            }
            try queue.close()
            for record in records.prefix(damages.count) {
                await #expect {
                    _ = try await store.key(record.keyID)
                } throws: { error in
                    (error as? StoreError)?.kind == .corrupted
                }
            }
            await #expect(throws: StoreError.self) { _ = try await store.keys(forUser: "user") }
            #expect(try await store.key(records[4].keyID)?.key == records[4].key)
        }
    }

    @Test("the log is copied back by the checkpointer, and the writes after it reuse the log from its beginning")
    func checkpoints() async throws {
        // Only the checkpoints the test runs, so that each round's log is known.
        try await Self.withStore(checkpoints: false) { store, path in
            func logSize() throws -> Int {
                (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
            }
            var sizes: [Int] = []
            for round in 0..<4 {
                for index in (round * 200)..<((round + 1) * 200) {
                    _ = try await store.insertKey(
                        TestKeys.record(index, receipt: Array(repeating: 1, count: 2_000)), maximumKeysPerUser: nil)
                }
                let pass = try store.checkpointer.checkpoint()
                #expect(pass.logPages > 0 && pass.checkpointedPages == pass.logPages)
                sizes.append(try logSize())
            }
            // Each round writes about as much: once the log is copied, the next round starts it again. Without the
            // checkpoints (SQLite's own are off) it would grow by a round's worth each time.
            #expect(sizes[3] <= sizes[0] * 5 / 4, "\(sizes)")
        }
    }

    /// SQLite syncs the database file after a checkpoint only when it copied the whole log; under steady writes a
    /// passive one never does, and the restart on the writer used to sync seconds of copied pages (80–100 ms with a
    /// million keys, every write waiting).
    @Test("a passive checkpoint that copies part of the log syncs the database file itself, once per copy")
    func passiveCheckpointSyncs() async throws {
        try await Self.withStore(checkpoints: false) { store, path in
            for index in 0..<50 {
                _ = try await store.insertKey(TestKeys.record(3_000 + index), maximumKeysPerUser: nil)
            }
            // A reader holds a snapshot: the frames written after it cannot be copied until it ends.
            var reader: OpaquePointer?
            #expect(sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY, nil) == SQLITE_OK)
            defer { sqlite3_close_v2(reader) }
            #expect(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM keys;", nil, nil, nil) == SQLITE_OK)
            for index in 50..<100 {
                _ = try await store.insertKey(TestKeys.record(3_000 + index), maximumKeysPerUser: nil)
            }
            let before = store.checkpointer.databaseSyncs
            let part = try store.checkpointer.checkpoint()
            #expect(part.checkpointedPages > 0 && part.checkpointedPages < part.logPages, "\(part)")
            #expect(store.checkpointer.databaseSyncs == before + 1)
            // Nothing more copied: nothing more to sync.
            _ = try store.checkpointer.checkpoint()
            #expect(store.checkpointer.databaseSyncs == before + 1)
            #expect(sqlite3_exec(reader, "COMMIT", nil, nil, nil) == SQLITE_OK)
            // The rest copied, the whole log: SQLite syncs the file itself, and this does not again.
            let whole = try store.checkpointer.checkpoint()
            #expect(whole.checkpointedPages == whole.logPages)
            #expect(store.checkpointer.databaseSyncs == before + 1)
        }
    }

    @Test("a backlog of expired challenges larger than a batch is purged whole, batch after batch")
    func purgeInBatches() async throws {
        try await Self.withStore { store, _ in
            let expired = Date(timeIntervalSince1970: 1_000_000_000)
            let count = SQLiteAppAttestStore.purgeBatch * 2 + 7
            for index in 0..<count {
                try await store.insertChallenge(
                    ChallengeRecord(
                        challenge: withUnsafeBytes(of: UInt64(index).bigEndian) { Array($0) }
                            + [UInt8](repeating: 1, count: 24),
                        purpose: "assertion", keyID: nil, userID: nil, expiresAt: expired))
            }
            let live = [UInt8](repeating: 9, count: 32)
            try await store.insertChallenge(
                ChallengeRecord(
                    challenge: live, purpose: "assertion", keyID: nil, userID: nil,
                    expiresAt: expired.addingTimeInterval(3_600)))
            #expect(try await store.purgeExpiredChallenges(now: expired.addingTimeInterval(1)) == count)
            #expect(try await store.outstandingChallenges(keyID: nil, userID: nil, now: .distantPast) == 1)
            #expect(try await store.challenge(live) != nil)
        }
    }

    /// A background checkpoint that fails leaves the log growing: it used to be discarded without a word. The database
    /// file is moved away, so that the checkpointer's connection, opened by path at its first checkpoint, cannot open.
    @Test("a failing background checkpoint is logged once per run of failures, and its recovery too")
    func failedCheckpointsAreReported() async throws {
        let records = LogRecords()
        try await Self.withStore(checkpoints: false, logger: records.logger) { store, path in
            _ = try await store.insertKey(TestKeys.record(4_000), maximumKeysPerUser: nil)
            try FileManager.default.moveItem(atPath: path, toPath: path + ".away")
            for _ in 0..<3 { store.checkpointer.backgroundCheckpoint() }
            #expect(store.checkpointer.failedCheckpoints == 3)
            let warnings = records.messages(at: .warning)
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.first?.contains("background checkpoint failed") == true)
            try FileManager.default.moveItem(atPath: path + ".away", toPath: path)
            store.checkpointer.backgroundCheckpoint()
            #expect(store.checkpointer.failedCheckpoints == 3)
            #expect(records.messages(at: .notice).contains { $0.contains("succeed again") })
            // A tick that races the store's closing is no failure to report.
            await store.close()
            store.checkpointer.backgroundCheckpoint()
            #expect(records.messages(at: .warning).count == 1)
            #expect(store.checkpointer.failedCheckpoints == 3)
        }
    }

    /// The size at which the log restarts is given in bytes and counted in the file's pages, from 1 MiB to 64 GiB.
    @Test("the log's restart size: 64 MiB by default, in the file's pages, from 1 MiB to 64 GiB")
    func logRestartSize() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("logrestart-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (bytes, pages) in [(nil, 16_384), (256 << 20, 65_536), (1 << 10, 256), (-1, 256), (Int.max, 16 << 20)] {
            let path = directory.appendingPathComponent("store-\(pages).sqlite").path
            let store =
                try bytes.map { try SQLiteAppAttestStore(path: path, logRestartBytes: $0) }
                ?? SQLiteAppAttestStore(path: path)
            #expect(store.checkpointer.restartPages == pages, "\(String(describing: bytes))")
            await store.close()
        }
    }

    /// A sync of the database file that fails after a passive checkpoint fails nothing (SQLite syncs the file again
    /// when it restarts the log), but is reported: once per run of failures, with the system's error.
    @Test("a failing sync of the checkpointed database file is logged once per run of failures")
    func failedSyncsAreReported() async throws {
        let records = LogRecords()
        try await Self.withStore(checkpoints: false, logger: records.logger) { store, path in
            let failing = Mutex(true)
            store.checkpointer.replaceSync { file in
                guard failing.withLock({ $0 }) else { return fsync(file) == 0 }
                errno = EIO
                return false
            }
            var reader: OpaquePointer?
            #expect(sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY, nil) == SQLITE_OK)
            defer { sqlite3_close_v2(reader) }
            // Each round copies part of the log (a reader's snapshot holds the rest), which is what is synced.
            func partialCopy(_ round: Int) async throws {
                #expect(sqlite3_exec(reader, "COMMIT", nil, nil, nil) == SQLITE_OK || round == 0)
                for index in 0..<20 {
                    _ = try await store.insertKey(TestKeys.record(5_000 + round * 100 + index), maximumKeysPerUser: nil)
                }
                #expect(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM keys;", nil, nil, nil) == SQLITE_OK)
                for index in 20..<40 {
                    _ = try await store.insertKey(TestKeys.record(5_000 + round * 100 + index), maximumKeysPerUser: nil)
                }
                store.checkpointer.backgroundCheckpoint()
            }
            for round in 0..<3 { try await partialCopy(round) }
            let warnings = records.messages(at: .warning).filter { $0.contains("syncing the checkpointed") }
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.first?.contains("Input/output error") == true, "\(warnings)")
            #expect(store.checkpointer.failedCheckpoints == 0, "a failed sync is not a failed checkpoint")
            #expect(store.checkpointer.databaseSyncs == 0)
            failing.withLock { $0 = false }
            try await partialCopy(3)
            #expect(store.checkpointer.databaseSyncs == 1)
            #expect(records.messages(at: .warning).filter { $0.contains("syncing the checkpointed") }.count == 1)
            #expect(sqlite3_exec(reader, "COMMIT", nil, nil, nil) == SQLITE_OK)
        }
    }

    /// What the writer does during the syncs of `catchUp(writingDuring:failing:)`'s checkpoint.
    enum CatchUpWriter: Sendable, CustomTestStringConvertible {
        /// 100 pages during the first sync only.
        case firstSync
        /// 100 pages during every sync.
        case everySync

        var testDescription: String { self == .firstSync ? "writes during the first sync" : "writes during every sync" }
    }

    /// Before a restart, which holds the writer while it copies and syncs what the log gained since the last passive
    /// checkpoint, passive rounds catch up off the writer until one finds few new pages: a slow sync of the database
    /// file (a million keys' worth of random pages) no longer leaves its writes to the restart. Here syncs write 100
    /// pages through another connection, the way the writer goes on meanwhile: once (one round more, then the restart),
    /// or always (the rounds stop at their bound, then the restart).
    @Test(
        "before restarting the log, passive rounds catch up with what was written during the last one's sync",
        arguments: [CatchUpWriter.firstSync, .everySync])
    func catchUpBeforeRestart(writer writes: CatchUpWriter) async throws {
        let syncs = try await Self.catchUp(writingDuring: writes, failing: false)
        #expect(syncs.calls == (writes == .firstSync ? 2 : 1 + SQLiteCheckpointer.catchUpRounds))
        // The restart had only what the last round's sync let through, and no snapshot to wait for.
        let result = try #require(syncs.result)
        #expect(result.restarted, "\(result)")
        #expect(result.checkpointedPages == result.logPages, "\(result)")
    }

    /// The catch-up rounds' syncs are one checkpoint's: when they all fail, that is one failure of the run, reported
    /// as the first (counted per round, the run's first warning was skipped).
    @Test("syncs that fail in a checkpoint's catch-up rounds are one failure, reported once")
    func failedCatchUpSyncsAreOneFailure() async throws {
        let records = LogRecords()
        let syncs = try await Self.catchUp(writingDuring: .everySync, failing: true, logger: records.logger)
        #expect(syncs.calls == 1 + SQLiteCheckpointer.catchUpRounds)
        let warnings = records.messages(at: .warning).filter { $0.contains("syncing the checkpointed") }
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.contains("Input/output error") == true, "\(warnings)")
    }

    /// One checkpoint of a log past its restart size (16 pages), each partial copy's sync replaced: `writes` says when
    /// the sync also writes 100 pages through another connection (a snapshot taken halfway, so that the next round
    /// copies part of them and syncs again), `failing` whether it fails with EIO. A failing one runs as the timer's
    /// checkpoint (which reports), and has no result.
    private static func catchUp(
        writingDuring writes: CatchUpWriter, failing: Bool,
        logger: Logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws -> (calls: Int, result: (logPages: Int, checkpointedPages: Int, restarted: Bool)?) {
        var outcome: (calls: Int, result: (logPages: Int, checkpointedPages: Int, restarted: Bool)?)?
        try await withStore(checkpoints: false, restartPages: 16, logger: logger) { store, path in
            for index in 0..<40 {
                _ = try await store.insertKey(TestKeys.record(6_000 + index), maximumKeysPerUser: nil)
            }
            var reader: OpaquePointer?
            var writer: OpaquePointer?
            defer {
                sqlite3_close_v2(reader)
                sqlite3_close_v2(writer)
            }
            try #require(sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY, nil) == SQLITE_OK)
            try #require(sqlite3_open_v2(path, &writer, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK)
            sqlite3_busy_timeout(writer, 10_000)
            let setup = "PRAGMA wal_autocheckpoint = 0; CREATE TABLE filler (b BLOB);"
            try #require(sqlite3_exec(writer, setup, nil, nil, nil) == SQLITE_OK)
            // A snapshot holds the last frames back, so that the first round copies part of the log and syncs it.
            try #require(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM keys;", nil, nil, nil) == SQLITE_OK)
            try #require(
                sqlite3_exec(writer, "INSERT INTO filler VALUES (zeroblob(8192))", nil, nil, nil) == SQLITE_OK)
            nonisolated(unsafe) let connections = (reader: reader, writer: writer)
            let calls = Mutex(0)
            store.checkpointer.replaceSync { file in
                let call = calls.withLock { count in
                    count += 1
                    return count
                }
                let (reader, writer) = connections
                _ = sqlite3_exec(reader, "COMMIT", nil, nil, nil)
                // The last round's sync, when every sync writes: no snapshot is taken again, so the restart can run.
                if call == 1 || (writes == .everySync && call <= SQLiteCheckpointer.catchUpRounds) {
                    _ = sqlite3_exec(writer, "INSERT INTO filler VALUES (zeroblob(200000))", nil, nil, nil)
                    _ = sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM keys;", nil, nil, nil)
                    _ = sqlite3_exec(writer, "INSERT INTO filler VALUES (zeroblob(200000))", nil, nil, nil)
                } else if writes == .everySync {
                    _ = sqlite3_exec(writer, "INSERT INTO filler VALUES (zeroblob(400000))", nil, nil, nil)
                }
                guard !failing else {
                    errno = EIO
                    return false
                }
                return fsync(file) == 0
            }
            var result: (logPages: Int, checkpointedPages: Int, restarted: Bool)?
            if failing {
                store.checkpointer.backgroundCheckpoint()
            } else {
                result = try store.checkpointer.checkpoint()
            }
            outcome = (calls.withLock { $0 }, result)
        }
        return try #require(outcome)
    }

    /// Eight tasks insert without a pause, so that a write is always queued: a passive checkpoint alone never saw the
    /// writer begin with the whole log copied, and the log's file grew by every page written (gigabytes while a
    /// fleet registered). The restarting checkpoint bounds it.
    @Test("under writes without a pause, the log's file stays bounded")
    func logBoundedUnderLoad() async throws {
        try await Self.withStore(checkpoints: false, restartPages: 256) { store, path in
            @Sendable func logSize() -> Int {
                ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0
            }
            let writing = Mutex(true)
            // On a thread of its own, as the store's checkpointer runs: a task could be scheduled only after the
            // writes, on a machine whose cooperative threads are all busy.
            let checkpoints = Task {
                await withCheckedContinuation { (done: CheckedContinuation<(Int, Int, Int), Never>) in
                    Thread.detachNewThread {
                        var restarts = 0
                        var missed = 0
                        var largest = 0
                        while writing.withLock({ $0 }) {
                            if let pass = try? store.checkpointer.checkpoint() {
                                if pass.restarted { restarts += 1 } else if pass.logPages >= 256 { missed += 1 }
                            }
                            largest = max(largest, logSize())
                            usleep(5_000)
                        }
                        done.resume(returning: (restarts, missed, largest))
                    }
                }
            }
            let receipt = [UInt8](repeating: 7, count: 1_000)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<8 {
                    group.addTask {
                        for index in stride(from: writer, to: 4_800, by: 8) {
                            _ = try await store.insertKey(
                                TestKeys.record(index, receipt: receipt), maximumKeysPerUser: nil)
                        }
                    }
                }
                try await group.waitForAll()
            }
            writing.withLock { $0 = false }
            let (restarts, missed, largest) = await checkpoints.value
            // Without restarts the file reached about 190 MB. Restarted from 256 pages (1 MiB), it stays within a few
            // MiB (3.3 MB here), or a few tens on a loaded machine. The restart runs on the writer, between two
            // writes, and no reader holds the log here: none may fail.
            #expect(restarts > 0)
            #expect(missed == 0, "\(missed) restarts did not finish")
            #expect(largest < 48 << 20, "the log's file reached \(largest) bytes")
            #expect(logSize() < 48 << 20)
        }
    }

    @Test("after close a read fails as unavailable")
    func closed() async throws {
        try await Self.withStore { store, _ in
            let record = TestKeys.record(0)
            _ = try await store.insertKey(record, maximumKeysPerUser: nil)
            #expect(try await store.key(record.keyID) != nil)
            await store.close()
            await #expect {
                _ = try await store.key(record.keyID)
            } throws: { error in
                (error as? StoreError)?.kind == .unavailable
            }
        }
    }

    @Test("the service's key reads start none beside a stalled one here: a SQLite read holds the calling thread")
    func noReadBesideAStalledOne() async throws {
        try await Self.withStore { store, _ in
            #expect(KeyReadBatcher(store: store).maximumInFlight == 1)
        }
        #expect(KeyReadBatcher(store: MemoryAppAttestStore()).maximumInFlight == KeyReadBatcher.maximumStalledReads)
    }
}
#endif  // SQLite
