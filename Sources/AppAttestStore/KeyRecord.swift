public import AppAttest
public import Foundation
import Synchronization

/// An attested key as stored: the key assertions are verified with, and what the service keeps beside it.
///
/// Stores decode a row into this once, parsing the point into its verification representation
/// (`AttestedPublicKey.init(x963Representation:)`), so that nothing downstream handles the raw bytes.
public struct KeyRecord: Sendable, Hashable {
    /// The key: its public key, App ID, environment and highest accepted counter.
    public var key: AttestedKey
    /// The user the key is bound to; nil for keys registered without one.
    public var userID: String?
    /// The latest receipt (from the attestation, then from refreshes). Empty in a record an assertion returns
    /// (`AuthenticatedAssertion.record`): the assertion path never reads it.
    public var receipt: [UInt8]
    /// The risk metric of the latest receipt, when it carried one.
    public var riskMetric: Int?
    /// When it was registered.
    public var createdAt: Date
    /// When its receipt was last replaced.
    public var receiptUpdatedAt: Date
    /// When the key was revoked; a revoked key verifies nothing.
    public var revokedAt: Date?

    /// The key's identifier.
    public var keyID: KeyID { key.keyID }

    /// A key record.
    public init(
        key: AttestedKey, userID: String?, receipt: [UInt8], riskMetric: Int?, createdAt: Date,
        receiptUpdatedAt: Date, revokedAt: Date?
    ) {
        self.key = key
        self.userID = userID
        self.receipt = receipt
        self.riskMetric = riskMetric
        self.createdAt = createdAt
        self.receiptUpdatedAt = receiptUpdatedAt
        self.revokedAt = revokedAt
    }
}

extension KeyRecord {
    /// This record with an empty receipt: what the assertion path reads and caches (a real receipt is most of a key's
    /// bytes, and an assertion never uses it).
    package var withoutReceipt: KeyRecord {
        var record = self
        record.receipt = []
        return record
    }

    /// A record from a stored row's columns, decoded once at the store's boundary: the point parsed into the key
    /// assertions are verified with, and checked against the stored keyId (a row whose point is not its keyId's is
    /// corrupted, and is refused rather than trusted).
    /// - Throws: ``StoreError/Kind/corrupted`` when a column does not decode.
    package static func decoding(
        keyID: some Collection<UInt8>, userID: String?, appID: String, environment: String,
        publicKey: some Collection<UInt8>, counter: Int64, receipt: [UInt8], riskMetric: Int?, createdAt: Double,
        receiptUpdatedAt: Double, revokedAt: Double?
    ) throws(StoreError) -> KeyRecord {
        guard let environment = AppAttestEnvironment(rawValue: environment), let appID = StoredAppIDs.appID(appID),
            let counter = UInt32(exactly: counter)
        else { throw StoreError(.corrupted, "a stored key does not decode") }
        // Compared as arrays: `elementsEqual` on a generic collection steps through it one element at a time.
        guard let point = try? AttestedPublicKey(x963Representation: publicKey),
            point.keyID.rawValue == Array(keyID)
        else { throw StoreError(.corrupted, "a stored key's point is not its keyId's") }
        return KeyRecord(
            key: AttestedKey(publicKey: point, appID: appID, environment: environment, counter: counter),
            userID: userID, receipt: receipt, riskMetric: riskMetric,
            createdAt: Date(timeIntervalSince1970: createdAt),
            receiptUpdatedAt: Date(timeIntervalSince1970: receiptUpdatedAt),
            revokedAt: revokedAt.map(Date.init(timeIntervalSince1970:)))
    }
}

/// The App IDs of stored rows, parsed once each: a store holds keys of a few App IDs, read again and again, and
/// parsing one validates it and hashes it (its rpIdHash). At most ``capacity`` are kept; others are parsed each time.
enum StoredAppIDs {
    private static let parsed = Mutex<[String: AppID]>([:])
    static let capacity = 256

    static func appID(_ string: String) -> AppID? {
        // Compared by bytes as well: `String` equality is canonical equivalence, under which a stored App ID that
        // is not ASCII (and so not an App ID) could equal one that is.
        if let known = parsed.withLock({ $0[string] }), known.rawValue.utf8.elementsEqual(string.utf8) { return known }
        guard let appID = try? AppID(string) else { return nil }
        parsed.withLock { parsed in
            if parsed.count < capacity { parsed[string] = appID }
        }
        return appID
    }
}
