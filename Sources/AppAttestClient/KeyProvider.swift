public import Foundation

#if canImport(DeviceCheck)
import DeviceCheck
#endif

/// What makes and uses an App Attest key: `DCAppAttestService` on a device (`DeviceCheckKeyProvider`, Apple platforms), a simulated
/// device in tests (`SimulatedKeyProvider` in AppAttestTesting), or your own.
///
/// Errors are ``AppAttestKeyProviderError``s; any other error a provider throws is treated as
/// ``AppAttestKeyProviderError/Code/unknownSystemFailure``.
public protocol AppAttestKeyProvider: Sendable {
    /// True when this device can attest keys (`DCAppAttestService.isSupported`).
    var isSupported: Bool { get async }
    /// Makes a new key in the Secure Enclave and returns its keyId (Base64 of 32 bytes).
    func generateKey() async throws -> String
    /// Asks Apple to certify the key; the attestation object commits to `clientDataHash`. Apple certifies a key
    /// once: a second call for the same key fails with ``AppAttestKeyProviderError/Code/invalidKey``.
    func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data
    /// Signs `clientDataHash` with the key; each assertion carries the next value of the key's counter.
    func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data
}

/// Why a key provider failed, with the codes of `DCError`.
public struct AppAttestKeyProviderError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The name of the code.
        public let name: String
        /// App Attest is not available on this device (simulators, older devices, some Macs).
        public static let featureUnsupported = Code(name: "featureUnsupported")
        /// The key is unknown or unusable (the app was reinstalled or restored, or the key was already attested).
        public static let invalidKey = Code(name: "invalidKey")
        /// An argument was rejected.
        public static let invalidInput = Code(name: "invalidInput")
        /// Apple's attestation server could not be reached; try again later.
        public static let serverUnavailable = Code(name: "serverUnavailable")
        /// Anything else.
        public static let unknownSystemFailure = Code(name: "unknownSystemFailure")
        /// The name of the code.
        public var description: String { name }
    }

    /// The kind of failure.
    public let code: Code
    /// What happened, for logs.
    public let message: String

    /// A failure of `code`.
    public init(_ code: Code, _ message: String = "") {
        self.code = code
        self.message = message
    }

    /// The code and the message.
    public var description: String { message.isEmpty ? code.name : "\(code.name): \(message)" }
}

#if canImport(DeviceCheck)
/// The key provider of a real device: `DCAppAttestService.shared`, its `DCError`s mapped to
/// ``AppAttestKeyProviderError``.
///
/// Where App Attest runs, as Apple documents it: iPhone and iPad (iOS 14), Apple TV (tvOS 15), Apple Watch (watchOS 9)
/// and Vision Pro; on a Mac `isSupported` is false before macOS 27 (Mac Catalyst apps and iPhone apps on Apple
/// silicon included), and a Mac may refuse a key it cannot protect (`invalidKey`). App extensions never support it,
/// whatever `isSupported` says: this provider reports `featureUnsupported` there.
@available(iOS 14.0, macOS 11.0, tvOS 15.0, watchOS 9.0, *)
public struct DeviceCheckKeyProvider: AppAttestKeyProvider {
    /// The device's App Attest service.
    public init() {}

    /// `DCAppAttestService.shared.isSupported`, and false in an app extension.
    public var isSupported: Bool { !Self.isAppExtension && DCAppAttestService.shared.isSupported }

    /// Whether this process is an app extension (its bundle is an `.appex`), where `generateKey` always fails.
    static var isAppExtension: Bool { Bundle.main.bundlePath.hasSuffix(".appex") }

    /// `DCAppAttestService.generateKey()`; `featureUnsupported` in an app extension.
    public func generateKey() async throws -> String {
        guard !Self.isAppExtension else {
            throw AppAttestKeyProviderError(.featureUnsupported, "App Attest does not run in app extensions")
        }
        return try await Self.mapped { try await DCAppAttestService.shared.generateKey() }
    }

    /// `DCAppAttestService.attestKey(_:clientDataHash:)`.
    public func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try await Self.mapped { try await DCAppAttestService.shared.attestKey(keyID, clientDataHash: clientDataHash) }
    }

    /// `DCAppAttestService.generateAssertion(_:clientDataHash:)`.
    public func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try await Self.mapped {
            try await DCAppAttestService.shared.generateAssertion(keyID, clientDataHash: clientDataHash)
        }
    }

    private static func mapped<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as DCError {
            let code: AppAttestKeyProviderError.Code
            switch error.code {
            case .featureUnsupported: code = .featureUnsupported
            case .invalidKey: code = .invalidKey
            case .invalidInput: code = .invalidInput
            case .serverUnavailable: code = .serverUnavailable
            default: code = .unknownSystemFailure
            }
            throw AppAttestKeyProviderError(code, error.localizedDescription)
        }
    }
}
#endif
