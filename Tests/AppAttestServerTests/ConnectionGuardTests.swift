#if Service
import AppAttestServer
import AppAttestTesting
import Foundation
import ServiceLifecycle
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Clients that pipeline requests and never read the answers: each connection is closed once its socket stays full,
/// so that a handful of them cannot hold every connection the server allows.
@Suite("appattest serve: clients that never read their answers")
struct ConnectionGuardTests {
    typealias H = ServeOperationTests

    /// Sends pipelined `/ping` requests without reading anything, for `seconds` or until the server stops taking them.
    static func flood(_ descriptor: Int32, seconds: Double) {
        let request = Array("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        let batch = [UInt8]((0..<64).flatMap { _ in request })
        let deadline = Date().addingTimeInterval(seconds)
        var sent = 0
        while Date() < deadline, sent < 64 << 20 {
            let count = batch.withUnsafeBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if count > 0 {
                sent += count
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                usleep(10_000)
            } else {
                return
            }
        }
    }

    /// Whether the peer has closed the connection (a FIN or a reset), read from the socket's TCP state, without
    /// reading any of its data.
    static func closedByPeer(_ descriptor: Int32) -> Bool {
        var info = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(info.count)
        // TCP_INFO (11) at level IPPROTO_TCP (6): the first byte is the state.
        guard info.withUnsafeMutableBytes({ getsockopt(descriptor, 6, 11, $0.baseAddress, &length) }) == 0 else {
            return true
        }
        let closeWait: UInt8 = 8, closed: UInt8 = 7
        return info[0] == closeWait || info[0] == closed
    }

    @Test("pipelined requests whose answers are never read: the connection is closed, and the server serves others")
    func neverReadingClients() async throws {
        try await Fixture.withListeningServer({
            $0.maximumConnections = 2
            $0.writeTimeoutSeconds = 1
            // The largest bound, so that the write deadline is what mostly closes these (one readable event can still
            // decode more than four times it: then the depth bound closes the connection, as `tooDeep` checks).
            $0.maximumPipelinedRequests = 1024
            $0.idleTimeoutSeconds = 60
        }) { port in
            // Both of the server's connections, with small receive windows (set before connecting, so that the window
            // advertised is small), so that the answers fill them soon.
            var clients = [try await Self.connected(port: port, receiveBuffer: 4096)]
            clients.append(H.connect(port: port, receiveBuffer: 4096))
            #expect(clients.count == 2 && clients.allSatisfy { $0 >= 0 })
            // On threads of their own: the flood blocks, and the server's handlers run on Swift's cooperative pool.
            for client in clients {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    Thread.detachNewThread {
                        Self.flood(client, seconds: 4)
                        done.resume()
                    }
                }
            }
            // Still reading nothing (reading would let the server go on): the server closes both, once the socket has
            // stayed full for the write deadline.
            for client in clients {
                var closed = false
                for _ in 0..<200 where !closed {
                    closed = Self.closedByPeer(client)
                    if !closed { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(closed, "a connection whose client reads nothing stayed open")
                close(client)
            }
            // And a new client is served at once.
            let next = H.connect(port: port)
            H.send(next, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let answer = await Self.answer(next, within: 20)
            #expect(answer?.hasPrefix("HTTP/1.1 200") == true, "\(answer ?? "no answer from the server")")
            close(next)
        }
    }

    /// A connection to a server that may still be starting: tried for up to 60 s (a loaded machine starts it late).
    static func connected(port: Int, receiveBuffer: Int32? = nil) async throws -> Int32 {
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(60) {
            let client = H.connect(port: port, receiveBuffer: receiveBuffer)
            if client >= 0 { return client }
            try await Task.sleep(for: .milliseconds(50))
        }
        Issue.record("the server did not accept a connection")
        return -1
    }

    /// Runs blocking socket calls on a thread of their own: the servers under test run on Swift's cooperative pool,
    /// which a blocked test would starve.
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: body()) }
        }
    }

    /// Waits up to `seconds` for bytes from the server, off the cooperative pool; the first bytes received, or nil.
    static func answer(_ descriptor: Int32, within seconds: Int32) async -> String? {
        await offPool { blockingAnswer(descriptor, within: seconds) }
    }

    private static func blockingAnswer(_ descriptor: Int32, within seconds: Int32) -> String? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, seconds * 1000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 2048)
        let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        return count > 0 ? String(decoding: buffer.prefix(count), as: UTF8.self) : nil
    }

    @Test("a client pipelining far deeper than the bound is closed without an answer read")
    func tooDeep() async throws {
        try await Fixture.withListeningServer({ _ in }) { port in
            let client = try await Self.connected(port: port)
            H.send(client, String(repeating: "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n", count: 200))
            var closed = false
            for _ in 0..<200 where !closed {
                closed = Self.closedByPeer(client)
                if !closed { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(closed, "200 pipelined requests, 4 times the bound of 16 exceeded")
            close(client)
        }
    }

    /// The head of a challenge request whose JSON body of `length` bytes is sent apart, with `headers` (lines ending
    /// in CRLF) added.
    static func challengeHead(_ headers: String = "", length: Int) -> String {
        "POST /v1/challenges HTTP/1.1\r\nHost: x\r\n\(headers)Content-Type: application/json\r\n"
            + "Content-Length: \(length)\r\n\r\n"
    }

    @Test("with a read-ahead bound of one, a request whose body comes after its head is still read and answered")
    func bodyAfterHeadWithBoundOfOne() async throws {
        try await Fixture.withListeningServer({ $0.maximumPipelinedRequests = 1 }) { port in
            let client = try await Self.connected(port: port)
            let body = #"{"purpose":"attestation"}"#
            H.send(client, Self.challengeHead("Authorization: Bearer \(Fixture.tokenA)\r\n", length: body.utf8.count))
            try await Task.sleep(for: .milliseconds(300))
            H.send(client, body)
            let answer = await Self.answer(client, within: 20)
            #expect(answer?.hasPrefix("HTTP/1.1 200") == true, "\(answer ?? "no answer")")
            close(client)
        }
    }

    @Test("a refused request is answered once its body has been read, or at once to a client that waits for 100")
    func refusalAfterBody() async throws {
        try await Fixture.withListeningServer({ _ in }) { port in
            let client = try await Self.connected(port: port)
            let body = #"{"purpose":"attestation"}"#
            H.send(client, Self.challengeHead(length: body.utf8.count))
            // No token: refused, but not before the body has come.
            let early = await Self.answer(client, within: 1)
            #expect(early == nil, "answered before the body was sent: \(early ?? "")")
            H.send(client, body)
            let answer = await Self.answer(client, within: 20)
            #expect(answer?.hasPrefix("HTTP/1.1 401") == true, "\(answer ?? "no answer")")
            close(client)
            // A client that waits to be told before it sends its body is answered at once.
            let waiting = try await Self.connected(port: port)
            H.send(waiting, Self.challengeHead("Expect: 100-continue\r\n", length: body.utf8.count))
            let told = await Self.answer(waiting, within: 20)
            #expect(told?.hasPrefix("HTTP/1.1 401") == true, "\(told ?? "no answer")")
            close(waiting)
        }
    }

    @Test("a connection past its lifetime is closed between requests, and reads no further request")
    func lifetime() async throws {
        try await Fixture.withListeningServer({ $0.connectionLifetimeSeconds = 2 }) { port in
            let client = try await Self.connected(port: port)
            // Answered while young.
            H.send(client, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(await Self.answer(client, within: 20)?.hasPrefix("HTTP/1.1 200") == true)
            // Kept busy past the lifetime: a request every 100 ms, each read before the next is sent.
            var closed = false
            for _ in 0..<40 where !closed {
                H.send(client, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                closed = await Self.answer(client, within: 2) == nil
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(closed, "a busy connection outlived its lifetime")
            close(client)
        }
    }
}
#endif  // Service
