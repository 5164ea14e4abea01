/// The `action` each problem code calls for, written out as README's Errors table documents it, independently of the
/// code that writes the documents: the routers' tests check every refusal they see against it.
package enum DocumentedProblemActions {
    /// The documented action for `code` (`none` for the verifier's codes and anything not listed).
    package static func action(for code: String) -> String {
        switch code {
        case "rateLimited", "tooManyChallenges", "storeUnavailable", "attestationBudgetExhausted": "retry"
        case "challengeExpired", "challengeMismatch", "challengeUnknown", "counterReplayed", "counterNotIncreasing",
            "staleTimestamp":
            "refetchChallenge"
        case "unknownKey", "keySuperseded": "reattest"
        default: "none"
        }
    }

    /// Whether a problem document's fields (or a refusal that report-only enforcement let through) carry the
    /// documented action; true for a body that is neither.
    package static func isDocumented(_ document: [String: Any]) -> Bool {
        guard let code = document["code"] as? String, document["type"] != nil || document["enforced"] != nil else {
            return true
        }
        return document["action"] as? String == action(for: code)
    }
}
