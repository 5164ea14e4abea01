public import Foundation

#if canImport(Security)
import Security
#endif

/// The app's App Attest key as the client remembers it across launches: its keyId, whether the server has
/// registered it, the attestation still waiting for the server's answer, and the history that keeps a failing app
/// from attesting again and again (``History``).
public struct AppAttestStoredKey: Codable, Sendable, Hashable {
    /// The keyId `generateKey` returned (Base64).
    public var keyID: String
    /// True once the server accepted the key's attestation.
    public var registered: Bool
    /// The attestation object and its challenge, from `attestKey` until the server has answered: posted again after
    /// a lost answer, since a device attests a key once.
    public var pendingAttestation: PendingAttestation?
    /// True when the key was discarded: kept only for its ``history``, never used again.
    public var discarded: Bool
    /// What the client did and was told about attestations on this install; nil when there is nothing to remember.
    public var history: History?

    /// An attestation made and not yet answered.
    public struct PendingAttestation: Codable, Sendable, Hashable {
        /// The attestation object.
        public var object: Data
        /// The challenge it commits to.
        public var challenge: Data

        /// An attestation of `object` over `challenge`.
        public init(object: Data, challenge: Data) {
            self.object = object
            self.challenge = challenge
        }
    }

    /// The attestation budget of this install: keys discarded in the last day, attestations the server refused in a
    /// row, and the time before which the client attests nothing.
    public struct History: Codable, Sendable, Hashable {
        /// When keys were discarded (failing on the device, unknown to the server, refused), the last 24 hours.
        public var discards: [Date]
        /// Registrations that failed in a row: attestations the server refused, and registrations that ran out of
        /// attempts while Apple was unavailable (the wait after the next one grows with it).
        public var refusedAttestations: Int
        /// No attestation before this time.
        public var notBefore: Date?
        /// How far the server's clock is ahead of the device's, in seconds (behind: negative), as a refused timestamp
        /// taught it (``AppAttestClientFreshness/timestamp``): kept, so that a device whose clock is off signs its
        /// first request after a launch on the server's clock too.
        public var clockOffset: TimeInterval?

        /// Nothing to remember.
        public init(
            discards: [Date] = [], refusedAttestations: Int = 0, notBefore: Date? = nil,
            clockOffset: TimeInterval? = nil
        ) {
            self.discards = discards
            self.refusedAttestations = refusedAttestations
            self.notBefore = notBefore
            self.clockOffset = clockOffset
        }

        var isEmpty: Bool { discards.isEmpty && refusedAttestations == 0 && notBefore == nil && clockOffset == nil }

        private enum CodingKeys: String, CodingKey {
            case discards, refusedAttestations, notBefore, clockOffset
        }

        /// Decodes a history; absent fields are empty.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            discards = Array((try container.decodeIfPresent([Date].self, forKey: .discards) ?? []).suffix(64))
            refusedAttestations = max(try container.decodeIfPresent(Int.self, forKey: .refusedAttestations) ?? 0, 0)
            notBefore = try container.decodeIfPresent(Date.self, forKey: .notBefore)
            // Within a year either way: anything else is not a clock's error.
            clockOffset = try container.decodeIfPresent(TimeInterval.self, forKey: .clockOffset).flatMap {
                $0.isFinite && abs($0) <= 366 * 86_400 ? $0 : nil
            }
        }
    }

    /// A key, registered or not yet.
    public init(
        keyID: String, registered: Bool, pendingAttestation: PendingAttestation? = nil, discarded: Bool = false,
        history: History? = nil
    ) {
        self.keyID = keyID
        self.registered = registered
        self.pendingAttestation = pendingAttestation
        self.discarded = discarded
        self.history = history
    }

    private enum CodingKeys: String, CodingKey {
        case keyID, registered, pendingAttestation, discarded, history
    }

    /// Decodes a stored key; a key stored by an earlier version (keyID and registered only) decodes as it was.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        keyID = try container.decode(String.self, forKey: .keyID)
        registered = try container.decode(Bool.self, forKey: .registered)
        pendingAttestation = try container.decodeIfPresent(PendingAttestation.self, forKey: .pendingAttestation)
        discarded = try container.decodeIfPresent(Bool.self, forKey: .discarded) ?? false
        history = try container.decodeIfPresent(History.self, forKey: .history)
    }
}

/// Where the client keeps ``AppAttestStoredKey`` between launches. A key that is lost costs a new attestation (a
/// call to Apple and a new key on the server), so keep it somewhere that survives relaunches:
/// `KeychainKeyStorage` on Apple platforms (the client's default there), ``FileKeyStorage`` or your own elsewhere.
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
    /// - Throws: when the file exists but cannot be read, is larger than 64 KiB, or is not a stored key.
    public func load() throws -> AppAttestStoredKey? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        let data = try Data(contentsOf: url)
        guard data.count <= 64 * 1024 else { throw CocoaError(.fileReadTooLarge) }
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
///
/// The item is scoped to the app: its service is the bundle identifier followed by `.app-attest`, so that two apps
/// of a team sharing a keychain access group never take each other's key, and its account names the user when you
/// keep a key per user. Give an access group only to share the key on purpose (an App Clip and its app).
public struct KeychainKeyStorage: AppAttestKeyStorage {
    /// The item's service (`kSecAttrService`).
    public let service: String
    /// The item's account (`kSecAttrAccount`).
    public let account: String
    /// The item's access group (`kSecAttrAccessGroup`), if any.
    public let accessGroup: String?

    /// The item of an earlier version's default (service `app-attest`, account `key`), moved to this one the first
    /// time it is read, so that an update keeps the device's key instead of attesting a new one.
    private let formerItem: (service: String, account: String)?

    /// Storage in the generic password item of `service` and `account`, in `accessGroup` when given.
    public init(service: String, account: String, accessGroup: String? = nil) {
        self.service = service
        self.account = account
        self.accessGroup = accessGroup
        self.formerItem = nil
    }

    /// Storage scoped to this app (service `<bundle identifier>.app-attest`) and, when given, to `user` (account
    /// `key.<user>`, else `key`). Without a user, a key stored by an earlier version's default item is moved here.
    public init(user: String? = nil, accessGroup: String? = nil) {
        self.service = "\(Bundle.main.bundleIdentifier ?? "app").app-attest"
        self.account = user.map { "key.\($0)" } ?? "key"
        self.accessGroup = accessGroup
        self.formerItem = user == nil ? (service: "app-attest", account: "key") : nil
    }

    private var query: [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
            kSecAttrAccount as String: account,
        ]
        if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
        return query
    }

    /// The stored key, if any (moved from an earlier version's default item the first time).
    public func load() throws -> AppAttestStoredKey? {
        if let key = try Self.read(query) { return key }
        guard let formerItem else { return nil }
        var former = query
        former[kSecAttrService as String] = formerItem.service
        former[kSecAttrAccount as String] = formerItem.account
        guard let key = try Self.read(former) else { return nil }
        try save(key)
        _ = SecItemDelete(former as CFDictionary)
        return key
    }

    private static func read(_ query: [String: Any]) throws -> AppAttestStoredKey? {
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
