#if HTTP
import AppAttestHTTP
import Testing

@Suite("Enrollment routes: who a request counts against")
struct CallerTests {
    @Test(
        "an IPv6 client counts as its /64, a mapped IPv4 address as the IPv4 one; anything else as it is",
        arguments: [
            ("192.0.2.7", "192.0.2.7"),
            ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
            ("2001:0db8:0001:0002:ffff::9", "2001:db8:1:2::/64"),
            ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
            ("fe80::1%eth0", "fe80:0:0:0::/64"),
            ("::1", "0:0:0:0::/64"),
            ("::ffff:192.0.2.7", "192.0.2.7"),
            ("64:ff9b::192.0.2.7", "192.0.2.7"),
            ("[2001:db8:1:2::1]", "2001:db8:1:2::/64"),
            ("[2001:db8:1:2::1]:443", "2001:db8:1:2::/64"),
            ("192.0.2.7:5678", "192.0.2.7"),
            ("192.0.2.999", "192.0.2.999"),
            ("anonymous", "anonymous"),
            ("2001:db8::zz", "2001:db8::zz"),
            ("", ""),
        ])
    func callers(address: String, caller: String) {
        #expect(AppAttestEnrollmentRoutes.caller(ipAddress: address) == caller)
    }

    @Test("the addresses of one IPv6 /64 share one rate limit; another /64 has its own")
    func oneBucketPerNetwork() {
        let limiter = AppAttestRateLimiter(ratePerSecond: 0.001, burst: 2, now: { 0 })
        let addresses = ["2001:db8:7:7::1", "2001:db8:7:7::2", "2001:db8:7:7:1:2:3:4"]
        let decisions = addresses.map { limiter.acquire(AppAttestEnrollmentRoutes.caller(ipAddress: $0)) }
        #expect(decisions.filter { $0 == .allowed }.count == 2)
        #expect(limiter.acquire(AppAttestEnrollmentRoutes.caller(ipAddress: "2001:db8:7:8::1")) == .allowed)
    }
}
#endif  // HTTP
