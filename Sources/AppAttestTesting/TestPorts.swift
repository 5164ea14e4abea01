import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Ports for test servers on 127.0.0.1, for this package's tests.
package enum TestPorts {
    /// A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's ephemeral range (32768 and up on
    /// Linux, 49152 and up on macOS), so that no outgoing connection of a concurrent test is given it meanwhile.
    /// A port is handed out once per process: two tests that ask at once never get the same port between the check
    /// and their servers' bind.
    package static func free() -> Int {
        while true {
            let port = Int.random(in: 20000...32000)
            guard given.withLock({ $0.insert(port).inserted }) else { continue }
            if isFree(port) { return port }
        }
    }

    private static let given = Mutex<Set<Int>>([])

    /// True when a listening socket can be bound to `port` on 127.0.0.1.
    static func isFree(_ port: Int) -> Bool {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(fd, socketAddress, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
