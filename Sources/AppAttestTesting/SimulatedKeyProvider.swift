public import AppAttest
public import AppAttestClient
import AppAttestLifecycle
public import Foundation

/// An `AppAttestKeyProvider` on ``SimulatedDevice``s: `AppAttestClient` runs on Linux and in CI against a server that
/// trusts ``TestCertificateAuthority``, exactly as it runs on an iPhone against Apple's root.
///
/// It behaves as `DCAppAttestService` does where the client depends on it: keys are created by `generateKey`,
/// attested any number of times, and each assertion carries the key's next counter. ``loseKeys()`` plays a
/// reinstall or a restore (every key then answers `invalidKey`), ``isSupported`` can be switched off, and
/// ``failNext(_:times:)`` makes the next calls fail with a `DCError`'s code.
///
/// ```swift
/// let provider = SimulatedKeyProvider(authority: authority, appID: appID)
/// let client = AppAttestClient(configuration: .init(baseURL: server), keyProvider: provider)
/// ```
public actor SimulatedKeyProvider: AppAttestKeyProvider {
    /// The authority that certifies the keys.
    public let authority: TestCertificateAuthority
    /// The App ID the keys attest for.
    public let appID: AppID
    /// The environment the keys attest in.
    public let environment: AppAttestEnvironment

    private var devices: [String: SimulatedDevice] = [:]
    private var supported = true
    private var failures: [AppAttestKeyProviderError.Code] = []
    private var calls: [String: Int] = [:]

    /// A provider whose keys `authority` certifies for `appID`.
    public init(
        authority: TestCertificateAuthority, appID: AppID, environment: AppAttestEnvironment = .production
    ) {
        self.authority = authority
        self.appID = appID
        self.environment = environment
    }

    /// True unless ``setSupported(_:)`` switched it off.
    public var isSupported: Bool { supported }

    /// Plays a device without App Attest: every call then fails with `featureUnsupported`.
    public func setSupported(_ supported: Bool) { self.supported = supported }

    /// Forgets every key, as a reinstall or a restore does: their keyIds then answer `invalidKey`.
    public func loseKeys() { devices.removeAll() }

    /// The next `times` calls to `attestKey` or `generateAssertion` fail with `code`.
    public func failNext(_ code: AppAttestKeyProviderError.Code, times: Int = 1) {
        failures += Array(repeating: code, count: times)
    }

    /// How many times each method ran (`generateKey`, `attestKey`, `generateAssertion`), failures included.
    public func callCount(_ method: String) -> Int { calls[method, default: 0] }

    /// The simulated device behind a keyId, if the provider still has it.
    public func device(_ keyID: String) -> SimulatedDevice? { devices[keyID] }

    /// A new key.
    public func generateKey() throws -> String {
        calls["generateKey", default: 0] += 1
        try check()
        let device = try SimulatedDevice(authority: authority, appID: appID, environment: environment)
        let keyID = device.keyID.base64EncodedString
        devices[keyID] = device
        return keyID
    }

    /// An attestation object for the key, committing to `clientDataHash`.
    public func attestKey(_ keyID: String, clientDataHash: Data) throws -> Data {
        calls["attestKey", default: 0] += 1
        let device = try usableDevice(keyID)
        return Data(try device.attest(clientDataHash: Array(clientDataHash)))
    }

    /// An assertion with the key's next counter.
    public func generateAssertion(_ keyID: String, clientDataHash: Data) throws -> Data {
        calls["generateAssertion", default: 0] += 1
        let device = try usableDevice(keyID)
        return Data(try device.assert(clientDataHash: Array(clientDataHash)))
    }

    /// The key's device, after the injected failures and the checks `DCAppAttestService` makes.
    private func usableDevice(_ keyID: String) throws -> SimulatedDevice {
        try check()
        if let code = failures.first {
            failures.removeFirst()
            throw AppAttestKeyProviderError(code, "simulated")
        }
        guard let device = devices[keyID] else { throw AppAttestKeyProviderError(.invalidKey, "unknown key") }
        return device
    }

    private func check() throws {
        guard supported else { throw AppAttestKeyProviderError(.featureUnsupported, "simulated") }
    }
}
