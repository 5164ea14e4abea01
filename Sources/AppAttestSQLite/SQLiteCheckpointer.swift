#if SQLite
package import AppAttestStore
import Dispatch
import Foundation
import GRDBSQLite
import Synchronization

/// Copies the write-ahead log back into the database file in the background, on a connection and a thread of its own,
/// so that no write waits for it.
///
/// SQLite's own checkpoint runs inside the commit that takes the log past 1,000 pages, on the writer: every write
/// queued behind that commit waits while the pages are copied and the file is synced. With a fleet far larger than
/// SQLite's page cache each accepted counter dirties a page of its own, so the log fills every fraction of a second and
/// the writer stalled on every fill (README, “Scale”). The store turns that off (`PRAGMA wal_autocheckpoint = 0` on its
/// connections) and this runs a passive checkpoint every ``interval`` instead: it never blocks a reader or the writer,
/// copies each page once however often it changed meanwhile, and lets the next write start the log again from its
/// beginning once all of it is copied. A checkpoint that cannot finish (a long read in another process) is retried
/// at the next tick; closing the store's last connection checkpoints whatever remains.
package final class SQLiteCheckpointer: Sendable {
    private struct State {
        var handle: OpaquePointer?
        var stopped = false
    }

    private let path: String
    private let queue = DispatchQueue(label: "AppAttestSQLite.checkpoint")
    nonisolated(unsafe) private let timer: any DispatchSourceTimer
    // The handle is used on `queue` only; the mutex orders its creation and closing with `stop()`.
    private let state = Mutex(State())
    /// Time between checkpoints.
    static let interval: DispatchTimeInterval = .milliseconds(250)

    /// - Parameter interval: the time between checkpoints; nil for none but those ``checkpoint()`` runs (tests).
    init(path: String, interval: DispatchTimeInterval? = SQLiteCheckpointer.interval) {
        self.path = path
        timer = DispatchSource.makeTimerSource(queue: queue)
        if let interval {
            timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(50))
            timer.setEventHandler { [weak self] in _ = try? self?.checkpoint() }
        }
        timer.activate()
    }

    deinit {
        timer.cancel()
        state.withLock { sqlite3_close_v2($0.handle) }
    }

    /// One passive checkpoint now: the pages of the log, and how many of them are in the database file after it.
    @discardableResult
    package func checkpoint() throws(StoreError) -> (logPages: Int, checkpointedPages: Int) {
        try state.withLock { state throws(StoreError) -> (logPages: Int, checkpointedPages: Int) in
            guard !state.stopped else { throw StoreError(.unavailable, "SQLite \(path): the store is closed") }
            if state.handle == nil {
                // A connection learns that the file is in WAL mode when it first reads it: until then it has no log
                // to checkpoint.
                state.handle = try SQLiteAppAttestStore.openConnection(
                    path: path, busyTimeout: nil, setup: "SELECT count(*) FROM sqlite_master")
            }
            var log: Int32 = 0
            var copied: Int32 = 0
            let result = sqlite3_wal_checkpoint_v2(state.handle, nil, SQLITE_CHECKPOINT_PASSIVE, &log, &copied)
            // BUSY: another process's checkpoint is running; the next tick tries again.
            guard result == SQLITE_OK || result == SQLITE_BUSY else {
                let message = String(cString: sqlite3_errmsg(state.handle))
                sqlite3_close_v2(state.handle)
                state.handle = nil
                throw StoreError(.unavailable, "SQLite \(path): checkpoint: \(message)")
            }
            return (Int(log), Int(copied))
        }
    }

    /// Stops the checkpoints and closes the connection (a checkpoint under way finishes first).
    func stop() {
        timer.cancel()
        state.withLock { state in
            state.stopped = true
            sqlite3_close_v2(state.handle)
            state.handle = nil
        }
    }
}
#endif  // SQLite
