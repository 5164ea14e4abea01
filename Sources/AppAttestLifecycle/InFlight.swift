import AppAttestStore

/// What a batcher has in flight (its key reads, its commits) and when each began, so that one that hangs (a
/// connection that stopped answering) does not hold back everything queued behind it until the store's deadline: only
/// those that began less than `threshold` ago count against `limit`, and `stalledLimit` bounds them all.
struct InFlight {
    /// In flight at once while none stalls.
    let limit: Int
    /// In flight at most, stalled ones included.
    let stalledLimit: Int
    /// How long one may run before it no longer counts against `limit`.
    let threshold: Duration
    private var started: [(token: Int, at: ContinuousClock.Instant)] = []
    private var lastToken = 0
    /// Whether a task of the batcher waits for a stall, to start what is pending then (one at most).
    private var watching = false

    init(limit: Int, stalledLimit: Int, threshold: Duration) {
        self.limit = limit
        self.stalledLimit = max(stalledLimit, limit)
        self.threshold = threshold
    }

    /// Whether another may begin now.
    func mayBegin() -> Bool {
        started.count < limit || (started.count < stalledLimit && counting(at: .now).count < limit)
    }

    /// Whether none may begin whatever stalls: `stalledLimit` are in flight.
    private var isFull: Bool { started.count >= stalledLimit }

    /// Whether the one of `token` may begin again now (``restart(_:)``): fewer than `limit` others count against the
    /// limit. A stalled one that ends while another runs may not take up the next operation beside it.
    func mayRestart(_ token: Int) -> Bool {
        counting(at: .now).filter { $0.token != token }.count < limit
    }

    /// When another may begin, if none ends before: the instant enough of those counting against `limit` have
    /// stalled. Nil when one may begin now, or when no stall could let another begin (``isFull``).
    func nextStall() -> ContinuousClock.Instant? {
        guard !isFull, started.count >= limit else { return nil }
        // One reading of the clock: which count now and when they stall are decided at the same instant.
        let now = ContinuousClock.now
        let stalls = counting(at: now).map { $0.at + threshold }.sorted()
        // Another may begin once all but `limit - 1` of those counting have stalled; fewer than `limit`: now.
        guard stalls.count >= limit else { return nil }
        return stalls[stalls.count - limit]
    }

    /// Whether a watch should start now, for a batcher with something pending (`pending`): none runs, and a stall
    /// could let another begin. It is marked as started; the watch finds for itself whether one may begin at once
    /// (``nextStall()`` nil, ``mayBegin()`` true), and ends with ``endWatch()``.
    mutating func startWatch(pending: Bool) -> Bool {
        guard !watching, pending, !isFull else { return false }
        watching = true
        return true
    }

    /// The watch ends: the next ``startWatch(pending:)`` may start another.
    mutating func endWatch() { watching = false }

    /// Those that count against `limit` at `now`: begun less than `threshold` before it (lazily: `mayBegin()` runs for
    /// every request, and counts them without a copy).
    private func counting(at now: ContinuousClock.Instant)
        -> LazyFilterSequence<[(token: Int, at: ContinuousClock.Instant)]>
    {
        started.lazy.filter { now - $0.at < threshold }
    }

    /// Records one that begins now; its token ends it.
    mutating func begin() -> Int {
        lastToken &+= 1
        started.append((lastToken, .now))
        return lastToken
    }

    /// The one of `token` begins again now (the next operation on the same slot).
    mutating func restart(_ token: Int) {
        if let index = started.firstIndex(where: { $0.token == token }) { started[index].at = .now }
    }

    mutating func end(_ token: Int) {
        if let index = started.firstIndex(where: { $0.token == token }) { started.remove(at: index) }
    }
}

/// What a batcher has queued for its next store operation (acceptances for a commit, misses for a read), with when
/// each was queued. A store that stops answering fails each operation only at its deadline, a batch at a time, while
/// requests keep arriving: so at most ``limit`` wait (the next is refused at once), and those that waited longer than
/// ``deadline`` when a batch is taken are handed back as expired instead of going to the store (never sent, so
/// nothing of theirs is applied). A request waits for its turn about ``deadline`` at most, and up to one more of the
/// store's deadlines when every operation in flight hangs.
struct PendingQueue<Element> {
    /// Queued at most.
    let limit: Int
    /// How long one may wait for its turn.
    let deadline: Duration
    /// The time now: the continuous clock's, or a test's own that moves only when the test moves it.
    let now: @Sendable () -> ContinuousClock.Instant
    private var items: [(element: Element, at: ContinuousClock.Instant)] = []

    /// How long one waits for its turn on a store that does not say how long its operations may take.
    static var defaultDeadline: Duration { .seconds(5) }

    /// - Parameters:
    ///   - deadline: how long one may wait; by default the store's bound on an operation
    ///     (``AppAttestStore/StoreOperationsAreBounded``), else ``defaultDeadline``.
    ///   - now: the time now (tests freeze it, so that a busy machine's scheduling expires nothing).
    init(
        limit: Int, deadline: Duration?, store: any AppAttestStore,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.limit = limit
        self.now = now
        self.deadline = deadline ?? (store as? any StoreOperationsAreBounded)?.operationBound ?? Self.defaultDeadline
    }

    var isEmpty: Bool { items.isEmpty }

    /// How many wait.
    var count: Int { items.count }

    /// Queues `element`; false, and nothing queued, when ``limit`` wait already.
    mutating func append(_ element: Element) -> Bool {
        guard items.count < limit else { return false }
        items.append((element, now()))
        return true
    }

    /// Up to `room` elements, the first queued first, and those that waited past ``deadline``, both taken out.
    mutating func take(_ room: Int) -> (batch: [Element], expired: [Element]) {
        // Queued in order: the expired are a prefix.
        let oldest = now() - deadline
        let expiredCount = items.prefix { $0.at < oldest }.count
        let expired = items.prefix(expiredCount).map(\.element)
        let batch = items.dropFirst(expiredCount).prefix(room).map(\.element)
        items.removeFirst(expiredCount + batch.count)
        return (batch, expired)
    }

    /// The refusal of an element that waited past ``deadline``, or of one refused because ``limit`` wait.
    func refusal(expired: Bool, _ what: String) -> StoreError {
        expired
            ? StoreError(.unavailable, "the store is behind: \(what) waited over \(deadline) for its turn")
            : StoreError(.unavailable, "the store is behind: \(limit) \(what)s wait already")
    }
}
