public import AppAttest
public import Foundation

/// One entry of a key's audit trail: what happened to the key, when, and why.
///
/// Stores write the events of a change in the same transaction as the change (a key stored, revoked, superseded, its
/// receipt replaced), so that the trail never shows a change that did not happen nor misses one that did. Events that
/// change nothing (an attestation refused, a key of an environment no longer allowed) are appended on their own.
public struct KeyEvent: Sendable, Hashable {
    /// What happened. New kinds may be added: switch over them with a `default`.
    public struct Kind: RawRepresentable, Sendable, Hashable, Codable, CustomStringConvertible {
        /// The stable name written to the store and answered by `GET /v1/keys/{keyId}/events`.
        public let rawValue: String
        /// A kind by its stable name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The stable name.
        public var description: String { rawValue }

        /// The key was attested and stored.
        public static let attested = Kind(rawValue: "attested")
        /// An attestation of this key was refused after its challenge was consumed; ``KeyEvent/detail`` is the code.
        public static let attestationRefused = Kind(rawValue: "attestationRefused")
        /// The key was revoked; ``KeyEvent/detail`` is the reason given.
        public static let revoked = Kind(rawValue: "revoked")
        /// The key was revoked because its user attested a newer one beyond the keys a user may hold;
        /// ``KeyEvent/detail`` is the newer key's keyId (Base64).
        public static let superseded = Kind(rawValue: "superseded")
        /// The key's receipt was replaced (a refresh at Apple); ``KeyEvent/detail`` is the new risk metric, if any.
        public static let receiptRefreshed = Kind(rawValue: "receiptRefreshed")
        /// An assertion of the key was refused because its environment is no longer allowed for its App ID;
        /// ``KeyEvent/detail`` is the environment.
        public static let environmentNotAllowed = Kind(rawValue: "environmentNotAllowed")

        /// What the retention purge keeps: a key's revocations, which say why it is refused (revoked by its owner, or
        /// superseded, whose device registers again), at most a few per key.
        package static let keptByPurge: Set<Kind> = [.revoked, .superseded]
        /// The SQL condition of the events the purge may delete (the stores' partial indexes on `time` use it too):
        /// `kind NOT IN ('revoked', 'superseded')`, from ``keptByPurge``, in a stable order.
        package static let purgeableCondition =
            "kind NOT IN (" + keptByPurge.map { "'\($0.rawValue)'" }.sorted().joined(separator: ", ") + ")"
    }

    /// The key it happened to.
    public var keyID: KeyID
    /// What happened.
    public var kind: Kind
    /// When.
    public var time: Date
    /// Why, or with what (see each ``Kind``); at most ``maximumDetailLength`` bytes of UTF-8.
    public var detail: String?

    /// The longest detail stored, in bytes of UTF-8 (longer ones are cut at a character boundary).
    public static let maximumDetailLength = 256

    /// An event.
    public init(keyID: KeyID, kind: Kind, time: Date, detail: String? = nil) {
        self.keyID = keyID
        self.kind = kind
        self.time = time
        self.detail = detail.map(Self.bounded)
    }

    /// `text` cut to ``maximumDetailLength`` bytes at a character boundary, with control, format (bidirectional
    /// overrides, zero-width characters) and line or paragraph separator characters replaced by spaces, so that a stored
    /// detail can be shown on a terminal as it is.
    static func bounded(_ text: String) -> String {
        var result = ""
        for character in text {
            let clean: Character =
                character.unicodeScalars.contains {
                    switch $0.properties.generalCategory {
                    case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse,
                        .unassigned:
                        return true
                    default: return false
                    }
                } ? " " : character
            guard result.utf8.count + String(clean).utf8.count <= maximumDetailLength else { break }
            result.append(clean)
        }
        return result
    }
}
