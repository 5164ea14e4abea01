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
    /// - An IPv4 address in IPv6 clothing, as the IPv4 one: mapped (`::ffff:192.0.2.1`, what a dual-stack socket
    ///   reports) or translated by NAT64 (`64:ff9b::192.0.2.1`, where every IPv4 client would otherwise share one
    ///   /64).
    ///
    /// The forms a proxy's header may carry are read too: `[2001:db8::1]` and `[2001:db8::1]:443` in brackets, an IPv4
    /// address with a port (`192.0.2.1:5678`), and a zone (`fe80::1%eth0`), which is dropped. Text that is no IP
    /// address comes back as it is.
    public static func caller(ipAddress: String) -> String {
        var text = Substring(ipAddress)
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            text = text[text.index(after: text.startIndex)..<close]
        } else if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") {
            text = text[..<colon]
        }
        if let zone = text.firstIndex(of: "%") { text = text[..<zone] }
        guard text.contains(":") else {
            var parsed = in_addr()
            return String(text).withCString({ inet_pton(AF_INET, $0, &parsed) }) == 1 ? String(text) : ipAddress
        }
        var parsed = in6_addr()
        guard String(text).withCString({ inet_pton(AF_INET6, $0, &parsed) }) == 1 else { return ipAddress }
        let bytes = withUnsafeBytes(of: &parsed) { Array($0) }
        let mapped = bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
        let translated = bytes[0..<12] == [0x00, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0]
        if mapped || translated { return bytes[12...].map(String.init).joined(separator: ".") }
        let groups = stride(from: 0, to: 8, by: 2).map {
            String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
        }
        return groups.joined(separator: ":") + "::/64"
    }
}
#endif  // HTTP
