import AppAttest
import AppAttestLifecycle
import AppAttestStore
import AppAttestTesting
import Foundation
import Synchronization
import Testing

/// The service keeps keys it has read for a few seconds; the store stays the authority. These tests change the store
/// behind the service's back, as another process or server would.
@Suite("Service key cache: the store decides")
struct KeyCacheTests {
    @Test("a key revoked elsewhere is refused at once, and its counter does not move", arguments: Backend.available)
    func revokedElsewhere(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let clientData = Array("first".utf8)
        _ = try await harness.service.authenticateAssertion(
            try device.assert(clientData: clientData), clientData: clientData, keyID: device.keyID)
        // Another server revokes it (straight in the store, bypassing this service and its cache).
        #expect(try await harness.store.revokeKey(device.keyID, at: Date()))
        await expectServiceError(.keyRevoked) {
            _ = try await harness.service.authenticateAssertion(
                try device.assert(clientData: clientData), clientData: clientData, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 1)
    }

    @Test(
        "a key read before this service revoked it is not cached after the revocation", .timeLimit(.minutes(1)),
        arguments: Backend.available)
    func readBeforeTheRevocation(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        struct Gate { var hold = true, held = false, open = false }
        let gate = Mutex(Gate())
        // The first key read, once it has read the key (not yet revoked), waits until the gate opens.
        let observed = ObservedAppAttestStore(
            harness.store,
            aroundKeyRead: { keyIDs in
                guard keyIDs == nil, gate.withLock({ $0.hold }) else { return }
                gate.withLock {
                    $0.hold = false
                    $0.held = true
                }
                while !gate.withLock({ $0.open }) { try? await Task.sleep(for: .milliseconds(1)) }
            })
        let service = AppAttestService(
            verifier: harness.service.verifier, store: observed, keyCacheLimits: .init(maximumAge: 3_600))
        // A challenge for the key reads it with its revocation (none yet); meanwhile this service revokes the key.
        let reading = Task {
            try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        }
        while !gate.withLock({ $0.held }) { try await Task.sleep(for: .milliseconds(1)) }
        #expect(try await service.revokeKey(device.keyID, reason: "lost"))
        gate.withLock { $0.open = true }
        _ = try? await reading.value
        // What the read found is not what the cache now holds: the key stays refused, as revoked.
        await expectServiceError(.keyRevoked) {
            _ = try await service.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        }
    }

    @Test("refreshes of one key at once share one call to Apple and its outcome", .timeLimit(.minutes(1)))
    func refreshesShared() async throws {
        final class Refresher: AppAttestReceiptRefresher {
            let calls = Mutex(0)
            let open = Mutex(false)
            let entered = Mutex(0)
            func refreshReceipt(for key: KeyRecord) async throws -> AppAttestReceiptRefresh {
                calls.withLock { $0 += 1 }
                while !open.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(1)) }
                return .notModified
            }
        }
        let harness = try await Harness(.memory)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let refresher = Refresher()
        let refreshes = (0..<8).map { _ in
            Task {
                refresher.entered.withLock { $0 += 1 }
                return try await harness.service.refreshReceipt(device.keyID, using: refresher)
            }
        }
        // All eight arrive while the first waits for Apple (each joins without a suspension once it entered).
        while refresher.calls.withLock({ $0 }) == 0 || refresher.entered.withLock({ $0 }) < 8 {
            try await Task.sleep(for: .milliseconds(1))
        }
        try await Task.sleep(for: .milliseconds(200))
        refresher.open.withLock { $0 = true }
        for refresh in refreshes { #expect(try await refresh.value == .notModified) }
        #expect(refresher.calls.withLock { $0 } == 1)
        // Once it ended, the next refresh calls Apple again.
        #expect(try await harness.service.refreshReceipt(device.keyID, using: refresher) == .notModified)
        #expect(refresher.calls.withLock { $0 } == 2)
    }

    @Test("a counter stored by another server refuses this server's replay of it", arguments: Backend.available)
    func counterAdvancedElsewhere(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let other = AppAttestService(verifier: harness.service.verifier, store: harness.store)
        // This server's cache keeps what it read for the whole test, however slow the machine.
        let here = AppAttestService(
            verifier: harness.service.verifier, store: harness.store, keyCacheLimits: .init(maximumAge: 3_600))
        let first = Array("first".utf8)
        // This server reads the key (counter 0) and caches it.
        _ = try await here.authenticateAssertion(
            try device.assert(clientData: first), clientData: first, keyID: device.keyID)
        // The other server accepts counters 2 and 3.
        let second = try device.assert(clientData: first)
        _ = try await other.authenticateAssertion(second, clientData: first, keyID: device.keyID)
        let third = try device.assert(clientData: first)
        _ = try await other.authenticateAssertion(third, clientData: first, keyID: device.keyID)
        // Replayed here, where the cached counter is still 1: the store refuses it.
        await expectServiceError(.counterReplayed) {
            _ = try await here.authenticateAssertion(second, clientData: first, keyID: device.keyID)
        }
        // And then this server knows the stored counter: the next replay is refused before the store is asked.
        await expectServiceError(.verificationFailed, verification: .counterNotIncreasing) {
            _ = try await here.authenticateAssertion(third, clientData: first, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 3)
        let fourth = try device.assert(clientData: first)
        #expect(
            try await here.authenticateAssertion(fourth, clientData: first, keyID: device.keyID).record.key.counter
                == 4)
    }

    @Test(
        "a replay on a cache miss gets the answer a read counter gives: outside the window the verifier's, within it a replay",
        arguments: Backend.available)
    func replayOnAMiss(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let data = Array("data".utf8)
        var assertions: [[UInt8]] = []
        for _ in 1...10 {
            let assertion = try device.assert(clientData: data)
            _ = try await harness.service.authenticateAssertion(assertion, clientData: data, keyID: device.keyID)
            assertions.append(assertion)
        }
        // Each on a service that has never read the key (on SQLite its read leaves the counter, 10, unread).
        func cold(_ policy: AppAttestVerifier.CounterPolicy) -> AppAttestService {
            AppAttestService(verifier: harness.service.verifier, store: harness.store, counterPolicy: policy)
        }
        for counter in [10, 9, 5] {
            await expectServiceError(
                .verificationFailed, verification: .counterNotIncreasing, "counter \(counter), strictly increasing"
            ) {
                _ = try await cold(.strictlyIncreasing).authenticateAssertion(
                    assertions[counter - 1], clientData: data, keyID: device.keyID)
            }
        }
        // A window of 4: 7 to 10 may arrive in any order, each once; 9 was used, 5 is below the window.
        await expectServiceError(.counterReplayed) {
            _ = try await cold(.reorderWindow(4)).authenticateAssertion(
                assertions[8], clientData: data, keyID: device.keyID)
        }
        await expectServiceError(.verificationFailed, verification: .counterNotIncreasing, "counter 5, a window of 4") {
            _ = try await cold(.reorderWindow(4)).authenticateAssertion(
                assertions[4], clientData: data, keyID: device.keyID)
        }
        #expect(try await harness.store.key(device.keyID)?.key.counter == 10)
    }

    @Test(
        "a revoked key is refused on a cache miss, for an assertion and for a challenge reserved for it, then remembered",
        arguments: Backend.available)
    func revokedOnAMiss(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let other = try await harness.registeredDevice()
        let data = Array("data".utf8)
        let cold = AppAttestService(
            verifier: harness.service.verifier, store: harness.store, keyCacheLimits: .init(maximumAge: 3_600))
        // Both keys read by this service's assertions (on SQLite without their revocations), then both revoked
        // elsewhere; one was revoked before this service ever read it.
        #expect(try await harness.store.revokeKey(device.keyID, at: Date()))
        await expectServiceError(.keyRevoked) {
            _ = try await cold.authenticateAssertion(
                try device.assert(clientData: data), clientData: data, keyID: device.keyID)
        }
        // Remembered as revoked: an assertion that does not verify is refused as revoked, before its signature is
        // checked or the store asked (on SQLite the first refusal came from the acceptance, after the signature).
        await expectServiceError(.keyRevoked) {
            _ = try await cold.authenticateAssertion(
                try device.assert(clientData: data), clientData: Array("other".utf8), keyID: device.keyID)
        }
        await expectServiceError(.keyRevoked) {
            _ = try await cold.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: device.keyID)
        }
        _ = try await cold.authenticateAssertion(
            try other.assert(clientData: data), clientData: data, keyID: other.keyID)
        #expect(try await harness.store.revokeKey(other.keyID, at: Date()))
        // A challenge reserved for a key is issued only for a key whose revocation was read: on SQLite this
        // service's cached entry never held it, so the store is asked; elsewhere the entry holds what was read, and
        // the revocation shows within the cache's age, as one made by another server does.
        if backend == .sqlite {
            await expectServiceError(.keyRevoked) {
                _ = try await cold.issueChallenge(purpose: AppAttestService.Purpose.assertion, keyID: other.keyID)
            }
        }
        await expectServiceError(.keyRevoked) {
            _ = try await cold.authenticateAssertion(
                try other.assert(clientData: data), clientData: data, keyID: other.keyID)
        }
    }

    @Test(
        "an assertion's record leaves the receipt out, read or cached; the store and key(_:) keep it",
        arguments: Backend.available)
    func receiptsLeftOut(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        let device = try await harness.registeredDevice()
        let stored = try #require(try await harness.store.key(device.keyID))
        #expect(!stored.receipt.isEmpty)
        let clientData = Array("first".utf8)
        // From the cache the registration filled, then, on another service, from the store's read of a miss.
        let cold = AppAttestService(verifier: harness.service.verifier, store: harness.store)
        for (service, counter) in [(harness.service, UInt32(1)), (cold, 2)] {
            let authenticated = try await service.authenticateAssertion(
                try device.assert(clientData: clientData), clientData: clientData, keyID: device.keyID)
            var expected = stored
            expected.receipt = []
            expected.key.counter = counter
            // The registration's cached record has its times as the clock gave them, the store's as stored.
            expected.createdAt = authenticated.record.createdAt
            expected.receiptUpdatedAt = authenticated.record.receiptUpdatedAt
            #expect(authenticated.record == expected)
            #expect(abs(authenticated.record.createdAt.timeIntervalSince(stored.createdAt)) < 0.001)
            #expect(try await service.key(device.keyID).receipt == stored.receipt)
        }
        #expect(try await harness.store.key(device.keyID)?.receipt == stored.receipt)
        // The batcher's read itself, before the cache strips anything: without the receipt where the store can.
        let batched = try #require(try await KeyReadBatcher(store: harness.store).key(device.keyID))
        #expect(batched.receipt.isEmpty == (backend != .memory))
        if let store = harness.store as? any KeyReadsWithoutReceipts {
            let read = try #require(try await store.keysWithoutReceipts(withIDs: [device.keyID]).first)
            let whole = try #require(try await harness.store.key(device.keyID))
            #expect(read.receipt.isEmpty && read.key == whole.key)
        } else {
            #expect(backend == .memory, "the SQLite and PostgreSQL stores read keys without their receipts")
        }
    }

    @Test(
        "concurrent cache misses are read together, each caller answered with its own key or none",
        arguments: Backend.available)
    func batchedMisses(backend: Backend) async throws {
        let harness = try await Harness(backend)
        defer { harness.close() }
        // Keys 0..<120 stored (every fourth revoked: a read returns it, revoked), 120..<160 never stored. The test
        // keys from 2,000 on are this test's alone (the PostgreSQL database is shared by the run's tests).
        let base = backend == .memory ? 2_000 : backend == .sqlite ? 2_200 : 2_400
        for index in 0..<120 {
            let record = TestKeys.record(base + index, revokedAt: index % 4 == 0 ? Date() : nil)
            #expect(try await harness.store.insertKey(record) == .inserted(superseding: []))
        }
        let ids = (0..<160).map { TestKeys.publicKey(base + $0).keyID }
        let read = try await harness.store.keys(withIDs: Array(ids.reversed()) + [ids[3]])
        #expect(Set(read.map(\.keyID)) == Set(ids.prefix(120)))
        #expect(read.filter { $0.revokedAt != nil }.count >= 30)

        let batcher = KeyReadBatcher(store: harness.store, queueDeadline: .seconds(3_600))
        #expect(batcher.readsCounters == (backend != .sqlite))
        let answers = try await withThrowingTaskGroup(of: (Int, KeyRecord?).self) { group in
            // Each key asked for twice at once, in an order that mixes stored and unknown keys.
            for index in (0..<160).shuffled() + (0..<160).shuffled() {
                group.addTask { (index, try await batcher.key(ids[index])) }
            }
            var answers: [(Int, KeyRecord?)] = []
            for try await answer in group { answers.append(answer) }
            return answers
        }
        #expect(answers.count == 320)
        for (index, record) in answers {
            if index < 120 {
                #expect(record?.keyID == ids[index])
                #expect(record?.key.publicKey == TestKeys.publicKey(base + index))
                // A revocation as read: none from a store that leaves it to the acceptance (SQLite's read).
                #expect((record?.revokedAt != nil) == (index % 4 == 0 && batcher.readsCounters))
            } else {
                #expect(record == nil, "key \(index) was never stored")
            }
        }
    }

    @Test("no more key reads run at once than the batcher's limit, however the misses arrive")
    func readLimit() async throws {
        let store = MemoryAppAttestStore()
        let records = (0..<64).map { TestKeys.record(2_600 + $0) }
        for record in records { _ = try await store.insertKey(record) }
        struct Reads { var now = 0, most = 0 }
        let reads = Mutex(Reads())
        let observed = ObservedAppAttestStore(
            store,
            aroundKeyRead: { keyIDs in
                if keyIDs != nil {
                    reads.withLock {
                        $0.now += 1
                        $0.most = max($0.most, $0.now)
                    }
                    // Long enough for misses to arrive while reads are in flight, and for slots to free while a
                    // miss decides whether to queue.
                    try? await Task.sleep(for: .microseconds(Int.random(in: 50...400)))
                } else {
                    reads.withLock { $0.now -= 1 }
                }
            })
        // No read stalls here, however slow the machine: the limit holds exactly.
        let batcher = KeyReadBatcher(store: observed, stallThreshold: .seconds(3_600), queueDeadline: .seconds(3_600))
        for _ in 0..<20 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for record in records.shuffled() + records.shuffled() {
                    group.addTask {
                        if Bool.random() { await Task.yield() }
                        let read = try await batcher.key(record.keyID)
                        #expect(read?.keyID == record.keyID)
                    }
                }
                try await group.waitForAll()
            }
        }
        let observedReads = reads.withLock { $0 }
        #expect(observedReads.most <= KeyReadBatcher.maximumReads)
        #expect(observedReads.now == 0)
    }

    @Test(
        "a key read that hangs holds no miss past its stall: those that arrive after it, nor one queued before it",
        .timeLimit(.minutes(1)), arguments: [false, true])
    func hungRead(queuedBeforeTheStall: Bool) async throws {
        let store = MemoryAppAttestStore()
        let records = (0..<8).map { TestKeys.record(2_700 + $0) }
        for record in records { _ = try await store.insertKey(record) }
        let open = Mutex(false)
        let inFlight = Mutex(0)
        // The read of the first key hangs until the gate opens (a connection that stopped answering).
        let observed = ObservedAppAttestStore(
            store,
            aroundKeyRead: { keyIDs in
                guard let keyIDs else { return inFlight.withLock { $0 -= 1 } }
                inFlight.withLock { $0 += 1 }
                if keyIDs.contains(records[0].keyID) {
                    while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) }
                }
            })
        let batcher = KeyReadBatcher(
            store: observed, stallThreshold: .milliseconds(queuedBeforeTheStall ? 200 : 50),
            queueDeadline: .seconds(3_600))
        let first = Task { try await batcher.key(records[0].keyID) }
        while inFlight.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        // Past the threshold, the next misses are read beside the hung read. Or the first of them queues at once, long
        // before the read in flight stalls, and no other arrives until it is answered: it is read at the stall.
        if !queuedBeforeTheStall { try await Task.sleep(for: .milliseconds(100)) }
        let (answered, later) = try await finishes(within: .seconds(10)) {
            var read: [KeyID?] = []
            for record in records.dropFirst() { read.append(try await batcher.key(record.keyID)?.keyID) }
            return read
        }
        #expect(answered, "the misses waited for the hung read")
        #expect(inFlight.withLock { $0 } == 1, "the hung read is still in flight")
        open.withLock { $0 = true }
        #expect(try await later.value == records.dropFirst().map(\.keyID))
        #expect(try await first.value?.keyID == records[0].keyID)
    }

    @Test("misses queued behind a read that hangs past the deadline are refused, never read", .timeLimit(.minutes(1)))
    func queuedPastTheDeadline() async throws {
        let store = MemoryAppAttestStore()
        let records = (0..<8).map { TestKeys.record(2_720 + $0) }
        for record in records { _ = try await store.insertKey(record) }
        let open = Mutex(false)
        let read = Mutex<[KeyID]>([])
        // Every read waits at the gate (a store that stopped answering).
        let observed = ObservedAppAttestStore(
            store,
            aroundKeyRead: { keyIDs in
                guard let keyIDs else { return }
                read.withLock { $0 += keyIDs }
                while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) }
            })
        // No read counts as stalled: what queues waits for the one in flight.
        let batcher = KeyReadBatcher(
            store: observed, stallThreshold: .seconds(3_600), queueDeadline: .milliseconds(200))
        let first = Task { try await batcher.key(records[0].keyID) }
        while read.withLock({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(1)) }
        let queued = records[1...].map { record in Task { try await batcher.key(record.keyID) } }
        while batcher.waiting < queued.count { try await Task.sleep(for: .milliseconds(1)) }
        try await Task.sleep(for: .milliseconds(250))
        open.withLock { $0 = true }
        #expect(try await first.value?.keyID == records[0].keyID)
        for miss in queued {
            await #expect(throws: StoreError.self, "a miss that waited past the deadline was read") {
                try await miss.value
            }
        }
        #expect(read.withLock { $0 } == [records[0].keyID])
        #expect(try await batcher.key(records[1].keyID)?.keyID == records[1].keyID)
    }

    @Test(
        "misses beyond one read's batch, queued behind reads that hang, are read once those reads stall",
        .timeLimit(.minutes(1)))
    func moreThanABatchBehindHungReads() async throws {
        let store = MemoryAppAttestStore()
        let records = (0..<100).map { TestKeys.record(2_740 + $0) }
        for record in records { _ = try await store.insertKey(record) }
        let open = Mutex(false)
        struct Reads {
            var count = 0
            var inFlight = 0
            var hung: Set<KeyID> = []
        }
        let reads = Mutex(Reads())
        // The first two reads hang until the gate opens: the first miss's, then the batch read at its stall.
        let observed = ObservedAppAttestStore(
            store,
            aroundKeyRead: { keyIDs in
                guard let keyIDs else { return reads.withLock { $0.inFlight -= 1 } }
                let hangs = reads.withLock { reads in
                    reads.count += 1
                    reads.inFlight += 1
                    guard reads.count <= 2 else { return false }
                    reads.hung.formUnion(keyIDs)
                    return true
                }
                if hangs { while !open.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(1)) } }
            })
        let batcher = KeyReadBatcher(
            store: observed, stallThreshold: .milliseconds(100), queueDeadline: .seconds(3_600))
        let first = Task { try await batcher.key(records[0].keyID) }
        while reads.withLock({ $0.inFlight }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        let rest = records.dropFirst().map(\.keyID)
        let misses = rest.map { keyID in Task { try await batcher.key(keyID)?.keyID } }
        while reads.withLock({ $0.count }) < 2 { try await Task.sleep(for: .milliseconds(1)) }
        // More misses queued than one read holds: those the two hung reads do not hold are read once both stall.
        let hung = reads.withLock { $0.hung }
        #expect(rest.contains { !hung.contains($0) })
        let (answered, _) = try await finishes(within: .seconds(10)) {
            for (keyID, miss) in zip(rest, misses) where !hung.contains(keyID) { _ = try await miss.value }
        }
        #expect(answered, "the misses left after a batch waited for the hung reads")
        #expect(reads.withLock { $0.inFlight } >= 2, "the hung reads are still in flight")
        open.withLock { $0 = true }
        for (keyID, miss) in zip(rest, misses) { #expect(try await miss.value == keyID) }
        #expect(try await first.value?.keyID == records[0].keyID)
    }

    @Test(
        "a read that stalled, once it ends, does not read what is pending beside a read that has not stalled",
        .timeLimit(.minutes(1)))
    func stalledReadEndsBesideAFreshOne() async throws {
        let store = MemoryAppAttestStore()
        let records = (0..<4).map { TestKeys.record(2_730 + $0) }
        for record in records { _ = try await store.insertKey(record) }
        let threshold = Duration.milliseconds(300)
        struct Reads {
            var inFlight = 0
            var secondBegan: ContinuousClock.Instant?
            var laterBegan: [ContinuousClock.Instant] = []
        }
        let reads = Mutex(Reads())
        let gates = Mutex([false, false])
        // The read of the first key hangs until its gate opens, and so does the read of the second.
        let observed = ObservedAppAttestStore(
            store,
            aroundKeyRead: { keyIDs in
                guard let keyIDs else { return reads.withLock { $0.inFlight -= 1 } }
                let gate = keyIDs.contains(records[0].keyID) ? 0 : keyIDs.contains(records[1].keyID) ? 1 : nil
                reads.withLock { reads in
                    reads.inFlight += 1
                    if gate == 1 { reads.secondBegan = .now } else if gate == nil { reads.laterBegan.append(.now) }
                }
                if let gate { while !gates.withLock({ $0[gate] }) { try? await Task.sleep(for: .milliseconds(1)) } }
            })
        let batcher = KeyReadBatcher(store: observed, stallThreshold: threshold, queueDeadline: .seconds(3_600))
        let first = Task { try await batcher.key(records[0].keyID) }
        while reads.withLock({ $0.inFlight }) == 0 { try await Task.sleep(for: .milliseconds(1)) }
        // The first read stalls; the second key's read starts beside it, and the other two queue behind that one.
        try await Task.sleep(for: threshold + .milliseconds(100))
        let second = Task { try await batcher.key(records[1].keyID) }
        while reads.withLock({ $0.secondBegan }) == nil { try await Task.sleep(for: .milliseconds(1)) }
        let later = Task {
            try await withThrowingTaskGroup(of: KeyID?.self) { group in
                for record in records.dropFirst(2) { group.addTask { try await batcher.key(record.keyID)?.keyID } }
                return try await group.reduce(into: Set<KeyID?>()) { $0.insert($1) }
            }
        }
        // The stalled read ends while the second has not stalled.
        try await Task.sleep(for: .milliseconds(20))
        gates.withLock { $0[0] = true }
        #expect(try await first.value?.keyID == records[0].keyID)
        let (answered, _) = try await finishes(within: .seconds(10)) { try await later.value }
        #expect(answered, "the queued misses waited for the second read to end, though it stalled")
        #expect(try await later.value == Set(records.dropFirst(2).map(\.keyID)))
        let observedReads = reads.withLock { $0 }
        // Read only once the second read stalled (the observer sees a read begin a little after the batcher does).
        let secondBegan = try #require(observedReads.secondBegan)
        #expect(!observedReads.laterBegan.isEmpty)
        for began in observedReads.laterBegan {
            #expect(
                began - secondBegan >= threshold - .milliseconds(150), "read \(began - secondBegan) after the second")
        }
        gates.withLock { $0[1] = true }
        #expect(try await second.value?.keyID == records[1].keyID)
    }

    /// A record for the `index`th test key.
    static func record(_ index: Int, counter: UInt32 = 0) throws -> KeyRecord {
        TestKeys.record(index, counter: counter)
    }

    @Test("a full cache evicts its least recently used key, one at a time, never everything")
    func leastRecentlyUsedEviction() throws {
        let cache = KeyCache(limits: .init(capacity: 3))
        let records = try (0..<5).map { try Self.record($0) }
        for record in records.prefix(3) { cache.insert(record) }
        // 0 is used again: 1 is now the least recently used.
        #expect(cache.entry(records[0].keyID) != nil)
        cache.insert(records[3])
        #expect(cache.count == 3)
        #expect(cache.entry(records[1].keyID) == nil, "the least recently used key was evicted")
        #expect(cache.entry(records[0].keyID) != nil)
        #expect(cache.entry(records[2].keyID) != nil)
        #expect(cache.entry(records[3].keyID) != nil)
        // Removing frees a slot: the next insertion evicts nothing.
        cache.remove(records[2].keyID)
        cache.insert(records[4])
        #expect(cache.count == 3)
        #expect([0, 3, 4].allSatisfy { cache.entry(records[$0].keyID) != nil })
        // Counters advance in place and never go back.
        cache.advance(records[0].keyID, to: 9)
        cache.advance(records[0].keyID, to: 4)
        #expect(cache.entry(records[0].keyID)?.counter == 9)
    }

    @Test("a removal keeps from the cache only the reads of its own stripe of keys begun before it")
    func removalsAreStriped() throws {
        let cache = KeyCache(limits: .init(capacity: 100))
        let removed = try Self.record(0)
        let stripe = KeyCache.stripe(of: removed.keyID)
        // One key of another stripe and one of the removed key's (1 in 64 of the keys: 2,000 hold one but for a
        // chance below 1e-13).
        var other: KeyRecord?
        var sameStripe: KeyRecord?
        for index in 1..<2_000 where other == nil || sameStripe == nil {
            let record = try Self.record(index)
            if KeyCache.stripe(of: record.keyID) == stripe {
                sameStripe = sameStripe ?? record
            } else {
                other = other ?? record
            }
        }
        let (otherKey, sameStripeKey) = (try #require(other), try #require(sameStripe))
        let otherBefore = cache.generation(of: otherKey.keyID)
        let sameStripeBefore = cache.generation(of: sameStripeKey.keyID)
        let removedBefore = cache.generation(of: removed.keyID)
        cache.remove(removed.keyID)
        cache.insert(otherKey, readSince: otherBefore)
        #expect(cache.entry(otherKey.keyID) != nil, "a read of another stripe's key begun before the removal is cached")
        cache.insert(sameStripeKey, readSince: sameStripeBefore)
        #expect(cache.entry(sameStripeKey.keyID) == nil, "a read of the removed key's stripe begun before it is not")
        cache.insert(removed, readSince: removedBefore)
        #expect(cache.entry(removed.keyID) == nil, "a read of the removed key begun before its removal is not cached")
        cache.insert(removed, readSince: cache.generation(of: removed.keyID))
        #expect(cache.entry(removed.keyID) != nil, "a read begun after the removal is")
    }

    @Test("a cache far smaller than the fleet stays at its capacity and keeps the most recent keys")
    func boundedUnderAFleet() throws {
        let cache = KeyCache(limits: .init(capacity: 1_000))
        for index in 0..<20_000 {
            cache.insert(try Self.record(index))
            #expect(cache.count == min(index + 1, 1_000))
        }
        #expect(cache.entry(try Self.record(18_999).keyID) == nil)
        #expect(cache.entry(try Self.record(19_000).keyID) != nil)
        #expect(cache.entry(try Self.record(19_999).keyID) != nil)
    }

    @Test("capacity 0 turns the cache off; entries older than the maximum age are read again")
    func disabledAndAged() throws {
        let off = KeyCache(limits: .init(capacity: 0))
        off.insert(try Self.record(1))
        #expect(off.count == 0)
        #expect(off.entry(try Self.record(1).keyID) == nil)
        let immediate = KeyCache(limits: .init(capacity: 10, maximumAge: 0))
        immediate.insert(try Self.record(1))
        #expect(immediate.entry(try Self.record(1).keyID) == nil)
        #expect(immediate.count == 0, "an aged entry is dropped when found")
    }
}
