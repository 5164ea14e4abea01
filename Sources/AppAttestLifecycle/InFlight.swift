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

    init(limit: Int, stalledLimit: Int, threshold: Duration) {
        self.limit = limit
        self.stalledLimit = max(stalledLimit, limit)
        self.threshold = threshold
    }

    /// Whether another may begin now.
    func mayBegin() -> Bool {
        if started.count < limit { return true }
        guard started.count < stalledLimit else { return false }
        let now = ContinuousClock.now
        return started.lazy.filter { now - $0.at < threshold }.count < limit
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
