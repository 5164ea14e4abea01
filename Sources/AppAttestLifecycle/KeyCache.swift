package import AppAttest
package import AppAttestStore
import Foundation
import Synchronization

/// Keys as last read (parsed once, at the store boundary; their receipts left out), for at most
/// ``AppAttestService/KeyCacheLimits/maximumAge`` seconds (so that a key revoked or a receipt's risk metric refreshed
/// by another process shows within that time; this process's own changes show at once) and at most
/// ``AppAttestService/KeyCacheLimits/capacity`` entries, the least recently used evicted first. Only an
/// optimisation: the store's atomic update is the authority on counters and revocation.
///
/// Every operation is constant time under a lock held for a few pointer moves: a full cache evicts one entry per
/// insertion (the least recently used), never empties itself, so a fleet far larger than the cache costs every
/// request the same.
package final class KeyCache: Sendable {
    /// A key as read: its record (whose counter is the one read, without its receipt) and when it was read. Shared by
    /// reference, so that a lookup copies one reference, not the record's fields.
    package final class Key: Sendable {
        let record: KeyRecord
        let fetchedAt: TimeInterval
        /// Whether the record's counter and revocation are the ones stored when it was read: false for a key read
        /// without them (a cache miss's read on SQLite, ``KeyReadBatcher/readsCounters``: counter 0, no revocation),
        /// whose acceptance decides both.
        let countersRead: Bool
        /// For a revoked key: whether a newer key of its user superseded it
        /// (``AppAttestServiceError/Code/keySuperseded``).
        let superseded: Bool

        init(record: KeyRecord, fetchedAt: TimeInterval, countersRead: Bool, superseded: Bool) {
            self.record = record
            self.fetchedAt = fetchedAt
            self.countersRead = countersRead
            self.superseded = superseded
        }
    }

    /// A cached key and the highest counter this process knows for it.
    package struct Entry: Sendable {
        let key: Key
        package var counter: UInt32

        package var record: KeyRecord { key.record }
        /// Whether ``counter`` is a highest counter the key had: read with the key, or accepted since. Not for a key
        /// read without its counter and not yet advanced (no counter 0 is ever accepted).
        package var counterKnown: Bool { key.countersRead || counter > 0 }
        /// The key to verify an assertion with: as read, with the highest counter this process knows.
        package var attestedKey: AttestedKey {
            var attested = key.record.key
            attested.counter = counter
            return attested
        }
    }

    /// The entries in slots of a doubly linked list by index, most recently used at `head`; `index` maps a key to
    /// its slot. Freed slots are reused, so the arrays never grow past the capacity.
    private struct State {
        var index: [KeyID: Int] = [:]
        /// How many times ``KeyCache/remove(_:)`` was called for the keys of each stripe (``KeyCache/stripe(of:)``).
        var removals = [UInt64](repeating: 0, count: KeyCache.stripes)
        var slots: [Slot] = []
        var head = -1
        var tail = -1
        var free: [Int] = []

        struct Slot {
            var keyID: KeyID
            var entry: Entry?
            var previous: Int
            var next: Int
        }

        mutating func unlink(_ slot: Int) {
            let previous = slots[slot].previous
            let next = slots[slot].next
            if previous >= 0 { slots[previous].next = next } else { head = next }
            if next >= 0 { slots[next].previous = previous } else { tail = previous }
        }

        mutating func pushFront(_ slot: Int) {
            slots[slot].previous = -1
            slots[slot].next = head
            if head >= 0 { slots[head].previous = slot }
            head = slot
            if tail < 0 { tail = slot }
        }

        mutating func remove(_ keyID: KeyID) {
            guard let slot = index.removeValue(forKey: keyID) else { return }
            unlink(slot)
            slots[slot].entry = nil
            free.append(slot)
        }
    }

    private let state = Mutex(State())
    /// Stripes of the removal counts: a read that began before a removal of a key of its stripe is not cached. Per
    /// stripe, so that removals of other keys (a storm of them, a fleet's receipt refreshes) do not stop every
    /// concurrent miss from being cached; a stripe is chosen by the key's hash value, whose seed is the process's, so
    /// that nobody outside can aim removals at one stripe.
    static let stripes = 64
    private let capacity: Int
    private let maximumAge: TimeInterval

    package init(limits: AppAttestService.KeyCacheLimits) {
        capacity = limits.capacity
        maximumAge = limits.maximumAge
    }

    private static var uptime: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// The entry for `keyID` unless absent or older than the maximum age; a hit becomes the most recently used.
    package func entry(_ keyID: KeyID) -> Entry? {
        guard capacity > 0 else { return nil }
        let now = Self.uptime
        return state.withLock { state in
            guard let slot = state.index[keyID], let entry = state.slots[slot].entry else { return nil }
            guard now - entry.key.fetchedAt < maximumAge else {
                state.remove(keyID)
                return nil
            }
            if state.head != slot {
                state.unlink(slot)
                state.pushFront(slot)
            }
            return entry
        }
    }

    /// Where the cache stands for `keyID`, taken before a read from the store whose result
    /// ``insert(_:countersRead:superseded:readSince:)`` is to cache: a removal since of a key of its stripe (a
    /// revocation or a receipt replaced by this process) means the read may predate it, and caching it would undo the
    /// removal for the cache's age.
    package func generation(of keyID: KeyID) -> UInt64 {
        let stripe = Self.stripe(of: keyID)
        return state.withLock { $0.removals[stripe] }
    }

    /// The stripe of removal counts that `keyID` belongs to.
    package static func stripe(of keyID: KeyID) -> Int { keyID.hashValue & (stripes - 1) }

    /// Caches a key as just read or attested, without its receipt (the assertion path uses none, and a real one is
    /// most of a record's bytes); a full cache evicts its least recently used entry.
    /// - Parameters:
    ///   - countersRead: false when the record was read without its counter and revocation (0 and none).
    ///   - superseded: for a revoked key, whether a newer key of its user superseded it.
    ///   - readSince: the ``generation(of:)`` taken before the record was read: when a key of its stripe was removed
    ///     since, the entry is returned but not cached (the read may be older than the removal). Nil for a key this
    ///     process just stored.
    @discardableResult
    package func insert(
        _ record: KeyRecord, countersRead: Bool = true, superseded: Bool = false, readSince: UInt64? = nil
    ) -> Entry {
        let record = record.withoutReceipt
        let entry = Entry(
            key: Key(record: record, fetchedAt: Self.uptime, countersRead: countersRead, superseded: superseded),
            counter: record.key.counter)
        guard capacity > 0 else { return entry }
        // The evicted entry is released after the lock, so that freeing its key is not done under it.
        let evicted = state.withLock { state -> Entry? in
            if let readSince, state.removals[Self.stripe(of: record.keyID)] != readSince { return nil }
            if let slot = state.index[record.keyID] {
                let old = state.slots[slot].entry
                state.slots[slot].entry = entry
                state.unlink(slot)
                state.pushFront(slot)
                return old
            }
            var evicted: Entry?
            if state.index.count >= capacity, state.tail >= 0 {
                let oldest = state.tail
                evicted = state.slots[oldest].entry
                state.remove(state.slots[oldest].keyID)
            }
            let slot: Int
            if let reused = state.free.popLast() {
                slot = reused
                state.slots[slot] = State.Slot(keyID: record.keyID, entry: entry, previous: -1, next: -1)
            } else {
                slot = state.slots.count
                state.slots.append(State.Slot(keyID: record.keyID, entry: entry, previous: -1, next: -1))
            }
            state.index[record.keyID] = slot
            state.pushFront(slot)
            return evicted
        }
        withExtendedLifetime(evicted) {}
        return entry
    }

    /// Records a counter this process stored, so that its own replays are refused before the store is asked.
    package func advance(_ keyID: KeyID, to counter: UInt32) {
        state.withLock { state in
            guard let slot = state.index[keyID], let current = state.slots[slot].entry?.counter, current < counter
            else { return }
            state.slots[slot].entry?.counter = counter
        }
    }

    /// Forgets a key (revoked, its receipt replaced, or unknown to the store); reads begun before are not cached.
    package func remove(_ keyID: KeyID) {
        let removed = state.withLock { state -> Entry? in
            state.removals[Self.stripe(of: keyID)] &+= 1
            guard let slot = state.index[keyID] else { return nil }
            let entry = state.slots[slot].entry
            state.remove(keyID)
            return entry
        }
        withExtendedLifetime(removed) {}
    }

    /// How many keys are cached.
    package var count: Int { state.withLock { $0.index.count } }
}
