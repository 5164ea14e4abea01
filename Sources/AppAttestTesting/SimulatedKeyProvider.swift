public import AppAttest
public import AppAttestClient
import AppAttestLifecycle
public import Foundation

/// An `AppAttestKeyProvider` on ``SimulatedDevice``s: `AppAttestClient` runs on Linux and in CI against a server that
/// trusts ``TestCertificateAuthority``, exactly as it runs on an iPhone against Apple's root.
///
/// It keeps `DCAppAttestService`'s rules, so that a client that passes against it behaves on a device: keys are
/// created by `generateKey`; a key is attested once (a second `attestKey` answers `invalidKey`, as does an assertion
/// by a key never attested); a failed attestation leaves the key unattested; each assertion carries the key's next
/// counter. ``loseKeys()`` plays a reinstall or a restore (every key then answers `invalidKey`), ``isSupported`` can
/// be switched off, and ``fail(_:with:keyID:times:)`` makes calls fail with a `DCError`'s code, per method and per
/// key.
///
/// ```swift
/// let provider = SimulatedKeyProvider(authority: authority, appID: appID)
/// let client = AppAttestClient(configuration: .init(baseURL: server), keyProvider: provider)
/// ```
public actor SimulatedKeyProvider: AppAttestKeyProvider {
    /// A method of `DCAppAttestService`, for failures injected with ``SimulatedKeyProvider/fail(_:with:keyID:times:)``.
    public struct Method: Sendable, Hashable, CustomStringConvertible {
        /// The method's name.
        public let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// `generateKey`.
        public static let generateKey = Method("generateKey")
        /// `attestKey`.
        public static let attestKey = Method("attestKey")
        /// `generateAssertion`.
        public static let generateAssertion = Method("generateAssertion")
    }

    private struct Failure {
        var code: AppAttestKeyProviderError.Code
        /// nil: `attestKey` or `generateAssertion`.
        var method: Method?
        var keyID: String?
        /// nil: every call.
        var remaining: Int?

        func matches(_ method: Method, _ keyID: String?) -> Bool {
            (self.method.map { $0 == method } ?? (method != .generateKey))
                && (self.keyID == nil || self.keyID == keyID)
        }
    }

    /// The authority that certifies the keys.
    public let authority: TestCertificateAuthority
    /// The App ID the keys attest for.
    public let appID: AppID
    /// The environment the keys attest in.
    public let environment: AppAttestEnvironment

    private var devices: [String: SimulatedDevice] = [:]
    private var attested: Set<String> = []
    private var supported = true
    private var failures: [Failure] = []
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
    public func loseKeys() {
        devices.removeAll()
        attested.removeAll()
    }

    /// The next `times` calls to `attestKey` or `generateAssertion` fail with `code`.
    public func failNext(_ code: AppAttestKeyProviderError.Code, times: Int = 1) {
        failures.append(Failure(code: code, method: nil, keyID: nil, remaining: max(times, 0)))
    }

    /// Calls of `method` (for one key, or any) fail with `code`: the next `times`, or every one when `times` is nil
    /// (a key that answers `unknownSystemFailure` to every assertion, as some do after a restore).
    public func fail(
        _ method: Method, with code: AppAttestKeyProviderError.Code, keyID: String? = nil, times: Int? = 1
    ) {
        failures.append(Failure(code: code, method: method, keyID: keyID, remaining: times.map { max($0, 0) }))
    }

    /// Whether the key was attested.
    public func isAttested(_ keyID: String) -> Bool { attested.contains(keyID) }

    /// How many times each method ran (`generateKey`, `attestKey`, `generateAssertion`), failures included.
    public func callCount(_ method: String) -> Int { calls[method, default: 0] }

    /// The simulated device behind a keyId, if the provider still has it.
    public func device(_ keyID: String) -> SimulatedDevice? { devices[keyID] }

    /// A new key.
    public func generateKey() throws -> String {
        calls["generateKey", default: 0] += 1
        try check()
        try injectedFailure(.generateKey, nil)
        let device = try SimulatedDevice(authority: authority, appID: appID, environment: environment)
        let keyID = device.keyID.base64EncodedString
        devices[keyID] = device
        return keyID
    }

    /// An attestation object for the key, committing to `clientDataHash`; `invalidKey` for a key already attested.
    public func attestKey(_ keyID: String, clientDataHash: Data) throws -> Data {
        calls["attestKey", default: 0] += 1
        let device = try usableDevice(keyID, .attestKey)
        guard !attested.contains(keyID) else { throw AppAttestKeyProviderError(.invalidKey, "already attested") }
        let object = Data(try device.attest(clientDataHash: Array(clientDataHash)))
        attested.insert(keyID)
        return object
    }

    /// An assertion with the key's next counter; `invalidKey` for a key never attested.
    public func generateAssertion(_ keyID: String, clientDataHash: Data) throws -> Data {
        calls["generateAssertion", default: 0] += 1
        let device = try usableDevice(keyID, .generateAssertion)
        guard attested.contains(keyID) else { throw AppAttestKeyProviderError(.invalidKey, "not attested") }
        return Data(try device.assert(clientDataHash: Array(clientDataHash)))
    }

    /// The key's device, after the injected failures and the checks `DCAppAttestService` makes.
    private func usableDevice(_ keyID: String, _ method: Method) throws -> SimulatedDevice {
        try check()
        try injectedFailure(method, keyID)
        guard let device = devices[keyID] else { throw AppAttestKeyProviderError(.invalidKey, "unknown key") }
        return device
    }

    private func injectedFailure(_ method: Method, _ keyID: String?) throws {
        guard let index = failures.firstIndex(where: { $0.matches(method, keyID) && $0.remaining != 0 }) else {
            return
        }
        let code = failures[index].code
        if let remaining = failures[index].remaining {
            if remaining <= 1 { failures.remove(at: index) } else { failures[index].remaining = remaining - 1 }
        }
        throw AppAttestKeyProviderError(code, "simulated")
    }

    private func check() throws {
        guard supported else { throw AppAttestKeyProviderError(.featureUnsupported, "simulated") }
    }
}
