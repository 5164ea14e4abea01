public import AppAttest

/// The outcome of inserting a key.
public enum KeyInsertion: Sendable, Hashable {
    /// The key was stored; `superseding` are the keys of its user it revoked, beyond the keys a user may hold.
    case inserted(superseding: [KeyID])
    /// The keyId is already stored; the existing record is returned.
    case duplicate(KeyRecord)
}
