public import Foundation

#if canImport(Security)
import Security
#endif

/// The app's App Attest key as the client remembers it across launches: its keyId, and whether the server has
/// registered it.
public struct AppAttestStoredKey: Codable, Sendable, Hashable {
    /// The keyId `generateKey` returned (Base64).
    public var keyID: String
    /// True once the server accepted the key's attestation.
    public var registered: Bool

    /// A key, registered or not yet.
    public init(keyID: String, registered: Bool) {
        self.keyID = keyID
        self.registered = registered
    }
}

/// Where the client keeps ``AppAttestStoredKey`` between launches. A key that is lost costs a new attestation (a
/// call to Apple and a new key on the server), so keep it somewhere that survives relaunches:
/// `KeychainKeyStorage` on Apple platforms, ``FileKeyStorage`` or your own elsewhere.
public protocol AppAttestKeyStorage: Sendable {
    /// The stored key, if any.
    func load() async throws -> AppAttestStoredKey?
    /// Replaces the stored key.
    func save(_ key: AppAttestStoredKey) async throws
    /// Forgets the stored key.
    func remove() async throws
}

/// Keeps the key in memory only: for tests, and for apps that choose to attest at every launch.
public actor MemoryKeyStorage: AppAttestKeyStorage {
    private var key: AppAttestStoredKey?

    /// Empty storage, or one that starts with `key`.
    public init(_ key: AppAttestStoredKey? = nil) { self.key = key }

    /// The stored key, if any.
    public func load() -> AppAttestStoredKey? { key }
    /// Replaces the stored key.
    public func save(_ key: AppAttestStoredKey) { self.key = key }
    /// Forgets the stored key.
    public func remove() { key = nil }
}

/// Keeps the key in a small JSON file, replaced atomically (written beside it, then renamed).
public struct FileKeyStorage: AppAttestKeyStorage {
    /// The file.
    public let url: URL

    /// Storage in the file at `url` (its directory must exist).
    public init(url: URL) { self.url = url }

    /// The stored key; nil when the file does not exist.
    /// - Throws: when the file exists but cannot be read, is larger than 4 KiB, or is not a stored key.
    public func load() throws -> AppAttestStoredKey? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        let data = try Data(contentsOf: url)
        guard data.count <= 4096 else { throw CocoaError(.fileReadTooLarge) }
        return try JSONDecoder().decode(AppAttestStoredKey.self, from: data)
    }

    /// Replaces the stored key atomically.
    public func save(_ key: AppAttestStoredKey) throws {
        try JSONEncoder().encode(key).write(to: url, options: .atomic)
    }

    /// Deletes the file.
    public func remove() throws {
        guard FileManager.default.fileExists(atPath: url.path) else { return }
        try FileManager.default.removeItem(at: url)
    }
}

#if canImport(Security)
/// Keeps the key in the Keychain (a generic password item, this device only, available after the first unlock),
/// so that it survives relaunches and updates. A restore to another device does not carry it over, and the
/// Secure Enclave key behind it would not work there anyway: the client then attests a new key.
public struct KeychainKeyStorage: AppAttestKeyStorage {
    /// The item's service (`kSecAttrService`).
    public let service: String
    /// The item's account (`kSecAttrAccount`).
    public let account: String

    /// Storage in the generic password item of `service` and `account`.
    public init(service: String = "app-attest", account: String = "key") {
        self.service = service
        self.account = account
    }

    private var query: [String: Any] {
        [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
            kSecAttrAccount as String: account,
        ]
    }

    /// The stored key, if any.
    public func load() throws -> AppAttestStoredKey? {
        var request = query
        request[kSecReturnData as String] = true
        request[kSecMatchLimit as String] = kSecMatchLimitOne
        var item: CFTypeRef?
        let status = SecItemCopyMatching(request as CFDictionary, &item)
        if status == errSecItemNotFound { return nil }
        guard status == errSecSuccess, let data = item as? Data else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(status))
        }
        return try JSONDecoder().decode(AppAttestStoredKey.self, from: data)
    }

    /// Replaces the stored key.
    public func save(_ key: AppAttestStoredKey) throws {
        let data = try JSONEncoder().encode(key)
        let update: [String: Any] = [kSecValueData as String: data]
        var status = SecItemUpdate(query as CFDictionary, update as CFDictionary)
        if status == errSecItemNotFound {
            var add = query
            add[kSecValueData as String] = data
            add[kSecAttrAccessible as String] = kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly
            status = SecItemAdd(add as CFDictionary, nil)
        }
        guard status == errSecSuccess else { throw NSError(domain: NSOSStatusErrorDomain, code: Int(status)) }
    }

    /// Deletes the item.
    public func remove() throws {
        let status = SecItemDelete(query as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(status))
        }
    }
}
#endif
