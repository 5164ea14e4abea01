#if HTTP
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension AppAttestEnrollmentRoutes {
    /// What a client's IP address counts as, for the routes' rate limiter and as the issuer of the challenges it
    /// asks for (`AppAttestService.ChallengeLimits.perIssuer`).
    ///
    /// - An IPv4 address, as it is.
    /// - An IPv6 address, as its /64 network (`2001:db8:1:2::/64`): a host is usually given a whole /64 and may
    ///   take any address in it, so that counting its addresses apart would give it 2⁶⁴ rate limits.
    /// - An IPv4 address mapped into IPv6 (`::ffff:192.0.2.1`, what a dual-stack socket reports), as the IPv4 one.
    ///
    /// A zone (`fe80::1%eth0`) is dropped; text that is not an IP address comes back as it is.
    public static func caller(ipAddress: String) -> String {
        let address = ipAddress.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard address.contains(":") else { return ipAddress }
        var parsed = in6_addr()
        guard String(address).withCString({ inet_pton(AF_INET6, $0, &parsed) }) == 1 else { return ipAddress }
        let bytes = withUnsafeBytes(of: &parsed) { Array($0) }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return bytes[12...].map(String.init).joined(separator: ".")
        }
        let groups = stride(from: 0, to: 8, by: 2).map {
            String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
        }
        return groups.joined(separator: ":") + "::/64"
    }
}
#endif  // HTTP
