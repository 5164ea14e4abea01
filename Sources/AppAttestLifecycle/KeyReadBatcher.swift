package import AppAttest
package import AppAttestStore
import Synchronization

/// Coalesces the key reads of concurrent cache misses: while ``maximumReads`` reads are in flight, the keys that miss
/// wait and are read together in the next one (``AppAttestStore/keys(withIDs:)``: one statement for all of them,
/// without the receipts on a store that reads them apart, `KeyReadsWithoutReceipts`, and without the counters on one
/// that keeps them apart, `KeyReadsWithoutCounters`: ``readsCounters``). A
/// fleet much larger than the key cache misses on nearly every request; batched, a miss costs a share of one read's
/// round trip and thread hand-offs instead of all of them (README, “Scale”). A quiet service reads one key at a time,
/// without delay.
///
/// No caller waits behind a read that does not hold its key for longer than one read: a caller that finds a read
/// slot free reads its own key with whatever is pending, and hands what arrives meanwhile to a task of its own.
///
/// A read that hangs (a connection that stopped answering) does not hold every miss until the store's deadline: a
/// read that began ``defaultStallThreshold`` ago no longer counts against ``maximumReads``, so the next miss starts
/// another with what is pending (at most ``maximumStalledReads`` in flight). What queued behind the hung read before it
/// stalled is read as soon as it stalls, whether or not another miss arrives (``watchForStall()``). Not on a store whose
/// reads hold the calling thread (SQLite's: `KeyReadsHoldTheCallingThread`), where a second read would only hold a
/// second thread.
package final class KeyReadBatcher: Sendable {
    typealias Waiter = CheckedContinuation<KeyRecord?, any Error>

    private struct State {
        var pending: PendingQueue<(KeyID, Waiter)>
        var reads: InFlight

        /// A read slot's token when one may be taken now.
        mutating func takeSlot() -> Int? { reads.mayBegin() ? reads.begin() : nil }

        /// Whether a watch (``watchForStall()``) should start for what is pending: it is marked as started.
        mutating func startWatch() -> Bool { reads.startWatch(pending: !pending.isEmpty) }

        /// Up to `room` misses to read, and the waiters of those that waited too long.
        mutating func take(room: Int) -> (batch: [(KeyID, Waiter)], expired: [Waiter]) {
            let (batch, expired) = pending.take(room)
            return (batch, expired.map(\.1))
        }
    }

    private let store: any AppAttestStore
    /// The store, when it reads keys without their receipts: the assertion path uses none, and a real one is most of
    /// a key's bytes.
    private let leanStore: (any KeyReadsWithoutReceipts)?
    /// The store, when it reads keys without their counters and revocations as well.
    private let unchangingStore: (any KeyReadsWithoutCounters)?
    private let state: Mutex<State>
    /// Reads in flight at once: one, while the next forms. With two, PostgreSQL's reads held about 4 keys instead of
    /// 6.5 and the server spent 80 µs more CPU per assertion with 100,000 keys (MEASUREMENTS.md, “Scale”).
    package static let maximumReads = 1
    /// Reads in flight at most, those that stalled included (one on a store whose reads hold the calling thread).
    package static let maximumStalledReads = 4
    /// How long a read runs before it no longer holds back the next one: far beyond a read's usual time (a
    /// millisecond or a few under load here; the p99 of a whole assertion is about 10 ms, README “Scale”).
    package static let defaultStallThreshold = Duration.milliseconds(100)
    /// The most keys in one read.
    static let maximumBatch = 64
    /// Misses queued at most (the next is refused `unavailable` at once), and how long one waits for its turn on a
    /// store that does not say how long its operations may take: as ``AcceptanceBatcher``'s.
    package static let maximumPending = AcceptanceBatcher.maximumPending

    /// - Parameters:
    ///   - stallThreshold: how long a read runs before another may start beside it (tests shorten it).
    ///   - queueDeadline: how long a miss may wait for its turn; by default the store's bound on an operation
    ///     (``AppAttestStore/StoreOperationsAreBounded``), else 5 s.
    package init(
        store: any AppAttestStore, stallThreshold: Duration = defaultStallThreshold, queueDeadline: Duration? = nil
    ) {
        self.store = store
        leanStore = store as? any KeyReadsWithoutReceipts
        unchangingStore = store as? any KeyReadsWithoutCounters
        state = Mutex(
            State(
                pending: PendingQueue(limit: Self.maximumPending, deadline: queueDeadline, store: store),
                reads: InFlight(
                    limit: Self.maximumReads,
                    stalledLimit: store is any KeyReadsHoldTheCallingThread
                        ? Self.maximumReads : Self.maximumStalledReads,
                    threshold: stallThreshold)))
    }

    /// Whether the records ``key(_:)`` reads carry each key's counter and revocation as stored: not on a store that
    /// keeps them apart (SQLite's, `KeyReadsWithoutCounters`), where they are 0 and none, and the acceptance decides
    /// both.
    package var readsCounters: Bool { unchangingStore == nil }

    /// The key as stored with its counter and revocation, without its receipt, or nil when there is none: on a store
    /// whose batched reads leave them out (``readsCounters``), read on its own; otherwise as ``key(_:)`` reads it.
    package func keyWithCounters(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        guard let unchangingStore else { return try await key(keyID) }
        return try await unchangingStore.keysWithoutReceipts(withIDs: [keyID]).first
    }

    /// How many misses wait for their turn.
    package var waiting: Int { state.withLock { $0.pending.count } }

    /// Reads in flight at most with this store, those that stalled included.
    package var maximumInFlight: Int { state.withLock { $0.reads.stalledLimit } }

    /// The key as stored, or nil when there is none.
    package func key(_ keyID: KeyID) async throws(StoreError) -> KeyRecord? {
        let slot = state.withLock { $0.takeSlot() }
        guard let slot else {
            do {
                return try await withCheckedThrowingContinuation { (waiter: Waiter) in
                    let (freed, watch, full) = state.withLock { state -> (Int?, Bool, StoreError?) in
                        // A read slot freed since: take it and read, rather than wait for a read nobody will start.
                        // Taken here, under the lock, so that reads in flight never exceed the limit.
                        if let slot = state.takeSlot() { return (slot, false, nil) }
                        guard state.pending.append((keyID, waiter)) else {
                            return (nil, false, state.pending.refusal(expired: false, "key read"))
                        }
                        return (nil, state.startWatch(), nil)
                    }
                    if let full { waiter.resume(throwing: full) }
                    if let freed { Task { await self.readAlone(keyID, waiter, slot: freed) } }
                    if watch { Task { await self.watchForStall() } }
                }
            } catch let error as StoreError {
                throw error
            } catch {
                throw StoreError(.unavailable, "\(error)")
            }
        }
        // This caller's key, with what is pending.
        let (others, expired, watch) = state.withLock { state in
            let (others, expired) = state.take(room: Self.maximumBatch - 1)
            return (others, expired, state.startWatch())
        }
        refuse(expired)
        // More than a read holds: the rest waits for this read, or for its stall.
        if watch { Task { await self.watchForStall() } }
        let records: [KeyID: KeyRecord]
        do {
            records = try await read([keyID] + others.map(\.0))
        } catch {
            for (_, waiter) in others { waiter.resume(throwing: error) }
            release(slot)
            throw error
        }
        for (id, waiter) in others { waiter.resume(returning: records[id]) }
        release(slot)
        return records[keyID]
    }

    /// A waiter whose read slot freed before it queued: it reads with the slot it took then.
    private func readAlone(_ keyID: KeyID, _ waiter: Waiter, slot: Int) async {
        do {
            let records = try await read([keyID])
            waiter.resume(returning: records[keyID])
        } catch {
            waiter.resume(throwing: error)
        }
        release(slot)
    }

    /// Gives the read slot back, or keeps it for what is pending, read in a task of its own (so that the caller
    /// that held the slot returns at once).
    private func release(_ slot: Int) {
        let more = state.withLock { state -> Bool in
            if state.pending.isEmpty {
                state.reads.end(slot)
                return false
            }
            return true
        }
        if more { Task { await self.drain(slot) } }
    }

    /// Reads what is pending, batch after batch, then gives the slot back. A slot whose read stalled gives it back at
    /// once while another read counts against ``maximumReads``: that read takes what is pending when it ends (or a
    /// watch, should it stall too), so that no more than ``maximumReads`` run that have not stalled.
    private func drain(_ slot: Int) async {
        while true {
            let (batch, expired, watch) = state.withLock { state -> ([(KeyID, Waiter)], [Waiter], Bool) in
                guard state.reads.mayRestart(slot) else {
                    state.reads.end(slot)
                    return ([], [], state.startWatch())
                }
                let (batch, expired) = state.take(room: Self.maximumBatch)
                if batch.isEmpty {
                    state.reads.end(slot)
                    return (batch, expired, false)
                }
                state.reads.restart(slot)
                return (batch, expired, state.startWatch())
            }
            refuse(expired)
            if watch { Task { await self.watchForStall() } }
            if batch.isEmpty { return }
            do {
                let records = try await read(batch.map(\.0))
                for (id, waiter) in batch { waiter.resume(returning: records[id]) }
            } catch {
                for (_, waiter) in batch { waiter.resume(throwing: error) }
            }
        }
    }

    /// Waits while what is pending may not be read, until the read in flight stalls, then reads it: a miss queued
    /// before a read hangs waits for the stall threshold, not for the next miss to arrive (on a quiet service, not
    /// until the store's deadline). Ends once nothing is pending, a read takes it, or none may start whatever stalls
    /// (``maximumStalledReads`` in flight, or a store whose reads hold the calling thread).
    private func watchForStall() async {
        while true {
            let (slot, stall) = state.withLock { state -> (Int?, ContinuousClock.Instant?) in
                if !state.pending.isEmpty, let stall = state.reads.nextStall() { return (nil, stall) }
                state.reads.endWatch()
                return (state.pending.isEmpty ? nil : state.takeSlot(), nil)
            }
            if let slot {
                // A read of its own, so that this watch ends now; what that read leaves pending starts another.
                Task { await self.drain(slot) }
                return
            }
            guard let stall else { return }
            try? await Task.sleep(until: stall, clock: .continuous)
        }
    }

    /// Refuses misses that waited past the queue's deadline (never read).
    private func refuse(_ expired: [Waiter]) {
        guard !expired.isEmpty else { return }
        let error = state.withLock { $0.pending.refusal(expired: true, "key read") }
        for waiter in expired { waiter.resume(throwing: error) }
    }

    private func read(_ keyIDs: [KeyID]) async throws(StoreError) -> [KeyID: KeyRecord] {
        var unique: [KeyID] = []
        var seen = Set<KeyID>()
        for keyID in keyIDs where seen.insert(keyID).inserted { unique.append(keyID) }
        let records =
            if let unchangingStore {
                try await unchangingStore.keysWithoutCounters(withIDs: unique)
            } else if let leanStore {
                try await leanStore.keysWithoutReceipts(withIDs: unique)
            } else {
                try await store.keys(withIDs: unique)
            }
        var byID: [KeyID: KeyRecord] = [:]
        for record in records where seen.contains(record.keyID) { byID[record.keyID] = record }
        return byID
    }
}
