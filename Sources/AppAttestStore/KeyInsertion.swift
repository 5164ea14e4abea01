/// The outcome of inserting a key.
public enum KeyInsertion: Sendable, Hashable {
    case inserted
    /// The keyId is already stored; the existing record is returned.
    case duplicate(KeyRecord)
}
