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
    typealias H = ServerHardeningTests

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
            $0.idleTimeoutSeconds = 60
        }) { port in
            // Both of the server's connections, with small receive windows (set before connecting, so that the window
            // advertised is small), so that the answers fill them soon.
            var clients: [Int32] = []
            for _ in 0..<100 where clients.isEmpty {
                let first = H.connect(port: port, receiveBuffer: 4096)
                if first >= 0 { clients.append(first) } else { try await Task.sleep(for: .milliseconds(50)) }
            }
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
            var answer = [UInt8](repeating: 0, count: 512)
            var poller = pollfd(fd: next, events: Int16(POLLIN), revents: 0)
            #expect(poll(&poller, 1, 5000) == 1, "no answer from the server")
            let count = answer.withUnsafeMutableBytes { recv(next, $0.baseAddress, $0.count, 0) }
            #expect(
                count > 0 && String(decoding: answer.prefix(max(0, count)), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
            close(next)
        }
    }
}
#endif  // Service
