#if SQLite
package import AppAttestStore
import Dispatch
import Foundation
import GRDB
import GRDBSQLite
import Logging
import Synchronization

/// Copies the write-ahead log back into the database file in the background, on a connection and a thread of its own,
/// so that no write waits for the copying, and keeps the log's file bounded.
///
/// SQLite's own checkpoint runs inside the commit that takes the log past 1,000 pages, on the writer: every write
/// queued behind that commit waits while the pages are copied and the file is synced. With a fleet far larger than
/// SQLite's page cache each accepted counter dirties a page of its own, so the log fills every fraction of a second and
/// the writer stalled on every fill (MEASUREMENTS.md, “Scale”). The store turns that off
/// (`PRAGMA wal_autocheckpoint = 0` on its connections) and this runs a passive checkpoint every ``interval`` instead:
/// it never blocks a reader or the writer, and copies each page once however often it changed meanwhile.
///
/// A passive checkpoint alone does not bound the log's file. SQLite starts the log again from its beginning only when
/// a write begins with every frame already copied, and under writes without a pause (a busy service, or the
/// registration of a fleet) another commit always lands between a checkpoint and the next write: the file grew by
/// every page written, gigabytes in minutes. So once the log holds ``restartPages`` or more, the passive checkpoint is
/// followed by a restarting one (`SQLITE_CHECKPOINT_RESTART`), which copies the few frames the passive one left and
/// waits for the readers of the log to finish (at most ``busyTimeout``), so that the next write starts the log from
/// its beginning. It runs on the store's writer, between two of its writes: it never waits for the writer's lock, and
/// the writer never finds the lock taken (SQLite's busy handler would sleep in steps of up to 100 ms, well past the few
/// milliseconds the checkpoint holds it). Writes wait for that step only, not for the copying of the whole log. A
/// checkpoint that cannot finish (a long read in another process) is retried at the next tick; closing the store's
/// last connection checkpoints whatever remains.
///
/// SQLite syncs the database file after a checkpoint only when the checkpoint copied the whole log, which a passive one
/// under steady writes never does: the pages it copied stayed dirty in the kernel until the restarting checkpoint
/// synced them, on the writer. With a million keys that was 80–100 ms of writeback every few seconds, with every write
/// waiting (MEASUREMENTS.md, “Scale”). So after a passive checkpoint that copied pages, this syncs the database file
/// itself (`fdatasync` on a descriptor of its own, on its own thread), and the restart's sync finds little left to
/// write. It adds no durability and takes none away: SQLite's own syncs stay where they were. That sync can itself take
/// a tenth of a second with a million keys' random pages, and what the writer added meanwhile was left to the restart,
/// on the writer: so before a restart, up to ``catchUpRounds`` more passive rounds (each with its sync) copy what came
/// during the one before, until one finds at most ``catchUpPages`` new pages. A tick that restarts holds the
/// checkpointer (and ``stop()``) for those rounds too: up to a second or so on a slow disk.
///
/// A checkpoint that fails (the file unreadable, the disk full) or a sync that fails is logged at `warning`: the first
/// of a run of failures, then once a minute while they last, and a `notice` when checkpoints succeed again. Until
/// then the log's file grows by every page written.
package final class SQLiteCheckpointer: Sendable {
    private struct State {
        var handle: OpaquePointer?
        /// A read-only descriptor of the database file, to sync what passive checkpoints copied into it; -1 if none.
        var file: Int32 = -1
        /// The log's pages in the database file when it was last synced.
        var synced: Int32 = 0
        /// The syncs of the database file this ran itself.
        var syncs = 0
        /// The background checkpoints that failed since the last one that succeeded, and in all.
        var failing = 0
        var failures = 0
        /// The syncs of the database file that failed since the last one that succeeded, and the last failure's
        /// description until a background checkpoint reports it.
        var syncFailing = 0
        var syncFailure: String?
        var stopped = false
        /// Syncs the database file in place of `fdatasync` (tests: a sync that fails).
        var syncOverride: (@Sendable (Int32) -> Bool)?

        /// Counts the syncs of one checkpoint, however many rounds it ran, as one: a failure in any round is one more
        /// failure of the run (so that the first of a run is the one reported), else a success ends the run.
        mutating func settle(_ syncs: RoundSyncs) {
            if let failure = syncs.failure {
                syncFailing += 1
                syncFailure = failure
            } else if syncs.synced {
                syncFailing = 0
            }
        }

        /// Closes the connection and the descriptor, if open.
        mutating func release() {
            sqlite3_close_v2(handle)
            handle = nil
            if file >= 0 { close(file) }
            file = -1
        }
    }

    /// What the rounds of one checkpoint made of their syncs of the database file.
    private struct RoundSyncs {
        /// The last failure's description, if one failed.
        var failure: String?
        /// Whether one succeeded.
        var synced = false
    }

    private let path: String
    private let queue = DispatchQueue(label: "AppAttestSQLite.checkpoint")
    nonisolated(unsafe) private let timer: any DispatchSourceTimer
    // The handle is used on `queue` only; the mutex orders its creation and closing with `stop()`.
    private let state = Mutex(State())
    /// Time between checkpoints.
    static let interval: DispatchTimeInterval = .milliseconds(250)
    /// Passive rounds at most before a restart, each catching up with what the writer added during the one before.
    package static let catchUpRounds = 4
    /// New pages in the log at or below which a catch-up round is the last: about 20 ms of a million-key fleet's writes
    /// on a small machine, which the restart then copies and syncs on the writer.
    static let catchUpPages: Int32 = 64
    /// How long a restarting checkpoint waits for the write in progress and the log's readers (it retries at the next
    /// tick after that).
    static let busyTimeout: TimeInterval = 0.1
    /// The log's size, in pages, from which a checkpoint also makes the next write start the log again
    /// (``SQLiteAppAttestStore/defaultLogRestartBytes`` by default, in the file's pages): bounding the file to about
    /// that plus what is written in one ``interval`` and during the catch-up rounds before a restart. Each restart
    /// holds the writer for the restarting checkpoint, most of it two syncs, whatever this size: 10–20 ms on a small
    /// virtual machine for a fleet of thousands of keys, tens of milliseconds and up to about 220 ms for a million,
    /// whose counters each dirty a page of their own (README, “Scale”). A larger log restarts less often.
    package let restartPages: Int
    /// The store's writer, on whose connection the restarting checkpoint runs, and that connection's busy timeout (the
    /// checkpoint waits for readers for ``busyTimeout`` only, then gives the connection its own back).
    private let writer: DatabasePool
    private let writerBusyTimeout: TimeInterval
    private let logger: Logger
    /// Background checkpoints between two warnings while they keep failing: a minute's worth.
    static let failuresBetweenWarnings = 240

    /// Whether the `count`th failure in a row is reported: the first of a run, and one a minute while they last.
    private static func reports(_ count: Int) -> Bool { count % failuresBetweenWarnings == 1 }

    /// - Parameters:
    ///   - writer: the store's pool, whose writer runs the restarting checkpoint; `writerBusyTimeout` its busy timeout.
    ///   - interval: the time between checkpoints; nil for none but those ``checkpoint()`` runs (tests).
    ///   - restartPages: the log's size from which a checkpoint restarts it (tests make it small).
    ///   - logger: where failed checkpoints and syncs are reported.
    init(
        path: String, writer: DatabasePool, writerBusyTimeout: TimeInterval,
        interval: DispatchTimeInterval? = SQLiteCheckpointer.interval,
        restartPages: Int, logger: Logger
    ) {
        self.path = path
        self.writer = writer
        self.writerBusyTimeout = writerBusyTimeout
        self.restartPages = restartPages
        self.logger = logger
        timer = DispatchSource.makeTimerSource(queue: queue)
        if let interval {
            timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(50))
            timer.setEventHandler { [weak self] in self?.backgroundCheckpoint() }
        }
        timer.activate()
    }

    /// The timer's checkpoint: runs ``checkpoint()`` and reports what failed (the type's documentation says when).
    package func backgroundCheckpoint() {
        // A tick that races `stop()` has nothing to report.
        guard !state.withLock({ $0.stopped }) else { return }
        let failure: StoreError?
        do {
            try checkpoint()
            failure = nil
        } catch {
            failure = error
        }
        enum Report {
            case failed(count: Int), resumed(after: Int)
        }
        let (report, syncFailure) = state.withLock { state -> (Report?, (String, Int)?) in
            let sync = state.syncFailure.flatMap { Self.reports(state.syncFailing) ? ($0, state.syncFailing) : nil }
            state.syncFailure = nil
            guard failure != nil else {
                defer { state.failing = 0 }
                return (state.failing > 0 ? .resumed(after: state.failing) : nil, sync)
            }
            state.failing += 1
            state.failures += 1
            return (Self.reports(state.failing) ? .failed(count: state.failing) : nil, sync)
        }
        if let (error, count) = syncFailure {
            logger.warning(
                "SQLite: syncing the checkpointed database file failed; SQLite syncs it again when it restarts the log",
                metadata: ["path": "\(path)", "error": "\(error)", "failures": "\(count)"])
        }
        switch report {
        case .failed(let count):
            logger.warning(
                "SQLite: the background checkpoint failed; the log's file grows until one succeeds",
                metadata: ["path": "\(path)", "error": "\(failure?.description ?? "")", "failures": "\(count)"])
        case .resumed(let count):
            logger.notice(
                "SQLite: background checkpoints succeed again", metadata: ["path": "\(path)", "failed": "\(count)"])
        case nil: break
        }
    }

    deinit {
        timer.cancel()
        state.withLock { $0.release() }
    }

    /// One checkpoint now, passive, then restarting when the log holds ``restartPages`` or more (after up to
    /// ``catchUpRounds`` more passive rounds, until one finds at most ``catchUpPages`` new pages): the pages of the log,
    /// how many of them are in the database file after it (the restart's figures when it ran), and whether the next
    /// write starts the log again.
    @discardableResult
    package func checkpoint() throws(StoreError) -> (logPages: Int, checkpointedPages: Int, restarted: Bool) {
        try state.withLock { state throws(StoreError) -> (logPages: Int, checkpointedPages: Int, restarted: Bool) in
            guard !state.stopped else { throw StoreError(.unavailable, "SQLite \(path): the store is closed") }
            var syncs = RoundSyncs()
            defer { state.settle(syncs) }
            if state.handle == nil {
                // A connection learns that the file is in WAL mode when it first reads it: until then it has no log
                // to checkpoint.
                // A passive checkpoint never waits: the busy timeout is only for opening.
                state.handle = try SQLiteAppAttestStore.openConnection(
                    path: path, busyTimeout: Self.busyTimeout, setup: "SELECT count(*) FROM sqlite_master")
            }
            var (ran, log, copied) = try passiveRound(&state, &syncs)
            // BUSY (another process's checkpoint holds the lock): nothing copied; the next tick tries again.
            guard ran else { return (Int(log), Int(copied), false) }
            guard Int(log) >= restartPages else { return (Int(log), Int(copied), false) }
            // The restart holds the writer while it copies and syncs what the writer added since this round began:
            // with a large fleet, this round's sync alone can take a tenth of a second, hundreds of pages written
            // meanwhile. So first catch up here, off the writer, until a round finds few new pages.
            for _ in 0..<Self.catchUpRounds {
                let before = log
                (ran, log, copied) = try passiveRound(&state, &syncs)
                // BUSY, or the log started again meanwhile (another process restarted it): no restart now.
                guard ran, log >= before else { return (Int(log), Int(copied), false) }
                guard log - before > Self.catchUpPages else { break }
            }
            let (restarted, restartLog, restartCopied) = try restart()
            // The log starts again: its frames are counted from the beginning.
            if restarted { state.synced = 0 }
            return (restartLog, restartCopied, restarted)
        }
    }

    /// A passive checkpoint, then a sync of the database file when it copied pages but not the whole log (SQLite
    /// syncs the file itself then), its outcome added to `syncs`: whether it ran, the log's pages, and how many of them
    /// are in the database file.
    private func passiveRound(_ state: inout State, _ syncs: inout RoundSyncs) throws(StoreError)
        -> (ran: Bool, log: Int32, copied: Int32)
    {
        let passive: (ran: Bool, log: Int32, copied: Int32)
        do throws(StoreError) { passive = try walCheckpoint(state.handle, SQLITE_CHECKPOINT_PASSIVE) } catch {
            // SQLite failed on this connection: the next tick opens another.
            sqlite3_close_v2(state.handle)
            state.handle = nil
            throw error
        }
        let (log, copied) = (passive.log, passive.copied)
        guard passive.ran else { return passive }
        if copied == log {
            // The whole log copied: SQLite synced the file itself.
            state.synced = copied
        } else if copied > 0, copied != state.synced {
            if state.file < 0 { state.file = open(path, O_RDONLY | O_CLOEXEC) }
            // A failure is reported (``backgroundCheckpoint()``) but fails nothing: SQLite's own sync of the file, at
            // the restart or when the log is wholly copied, is the one that counts.
            if state.file >= 0, (state.syncOverride ?? Self.sync)(state.file) {
                state.synced = copied
                state.syncs += 1
                syncs.synced = true
            } else {
                syncs.failure =
                    "\(state.file < 0 ? "open" : "fdatasync"): \(String(cString: strerror(errno)))"
            }
        }
        return passive
    }

    /// The restarting checkpoint, on the writer's connection between two writes: whether the next write starts the
    /// log again (false when a reader of the log did not finish within ``busyTimeout``), and the log's pages and how
    /// many of them are in the database file.
    private func restart() throws(StoreError) -> (restarted: Bool, logPages: Int, checkpointedPages: Int) {
        let own = SQLiteAppAttestStore.busyTimeoutMilliseconds(writerBusyTimeout)
        let short = SQLiteAppAttestStore.busyTimeoutMilliseconds(Self.busyTimeout)
        do {
            return try writer.writeWithoutTransaction { db in
                let handle = db.sqliteConnection
                sqlite3_busy_timeout(handle, short)
                defer { sqlite3_busy_timeout(handle, own) }
                let (ran, log, copied) = try walCheckpoint(handle, SQLITE_CHECKPOINT_RESTART)
                return (ran, Int(log), Int(copied))
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.unavailable, "SQLite \(path): checkpoint: \(error)")
        }
    }

    /// One checkpoint of `mode` on `handle`: whether it ran to its end (false on BUSY: another process's checkpoint
    /// holds the lock, or, restarting, a reader of the log did not finish within the busy timeout), the log's pages
    /// and how many of them are in the database file (-1 each when it did not run). Any other result throws.
    private func walCheckpoint(_ handle: OpaquePointer?, _ mode: Int32) throws(StoreError)
        -> (ran: Bool, log: Int32, copied: Int32)
    {
        var log: Int32 = 0
        var copied: Int32 = 0
        let result = sqlite3_wal_checkpoint_v2(handle, nil, mode, &log, &copied)
        guard result == SQLITE_OK || result == SQLITE_BUSY else {
            throw StoreError(.unavailable, "SQLite \(path): checkpoint: \(String(cString: sqlite3_errmsg(handle)))")
        }
        return (result == SQLITE_OK, log, copied)
    }

    /// How many times a passive checkpoint synced the database file itself (tests).
    package var databaseSyncs: Int { state.withLock { $0.syncs } }

    /// Syncs the database file with `sync` in place of `fdatasync` from now on (tests).
    package func replaceSync(_ sync: @escaping @Sendable (Int32) -> Bool) {
        state.withLock { $0.syncOverride = sync }
    }

    /// How many background checkpoints failed (tests).
    package var failedCheckpoints: Int { state.withLock { $0.failures } }

    /// Writes the file's data back to the disk: true when the kernel says it did.
    private static func sync(_ file: Int32) -> Bool {
        #if canImport(Glibc)
        fdatasync(file) == 0
        #else
        fsync(file) == 0
        #endif
    }

    /// Stops the checkpoints and closes the connection (a checkpoint under way finishes first).
    func stop() {
        timer.cancel()
        state.withLock { state in
            state.stopped = true
            state.release()
        }
    }
}
#endif  // SQLite
