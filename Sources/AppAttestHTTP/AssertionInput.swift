#if HTTP
public import AppAttest
import AppAttestLifecycle
import Foundation
public import HTTPTypes
internal import AppAttestWire

/// An assertion to verify, as it arrived: from a protected request's header fields (the middleware), or from the
/// JSON of `appattest serve`'s verification operation. Both doors produce this one value, and one operation verifies it
/// (``AppAttestHTTPOperations/verify(_:timestampWindow:now:authorize:)``), so that they decode, bind and check
/// freshness the same way.
public struct AppAttestAssertionInput: Sendable, Hashable {
    /// What the client data binds, and how.
    public enum Binding: Sendable, Hashable {
        /// The canonical binding of an HTTP request (`AppAttestClientData.request`): its method, percent-encoded path
        /// and query, SHA-256 of its body, and its proof of freshness.
        case request(method: String, pathAndQuery: String, bodySHA256: [UInt8], proof: Proof)
        /// The app's own client data, beginning with the challenge it binds, if any (`AppAttestClientData.opaque`).
        case opaque(clientData: [UInt8], challenge: [UInt8]?)
    }

    /// How a bound request proves that it is fresh.
    public enum Proof: Sendable, Hashable {
        /// A one-time challenge the server issued.
        case challenge([UInt8])
        /// The Unix time in milliseconds the app signed, accepted within a window of the server's clock.
        case timestamp(milliseconds: Int64)
    }

    /// The key the app says signed it.
    public var keyID: KeyID
    /// The CBOR assertion.
    public var assertion: [UInt8]
    /// What the client data binds.
    public var binding: Binding
    /// Also issue the key's next challenge, stored with the counter (``AppAttestFreshness/nextChallengeInResponse``).
    public var issuesNextChallenge: Bool

    /// An input from its parts.
    public init(keyID: KeyID, assertion: [UInt8], binding: Binding, issuesNextChallenge: Bool = false) {
        self.keyID = keyID
        self.assertion = assertion
        self.binding = binding
        self.issuesNextChallenge = issuesNextChallenge
    }

    /// The assertion a protected request carries in its header fields (``AppAttestHTTPHeaders``), bound to its
    /// method, path and query and body, with the proof of freshness the route asks for.
    /// - Parameters:
    ///   - request: the request head as received (its path is the percent-encoded target, trailing slash kept).
    ///   - bodySHA256: SHA-256 of the body as received.
    ///   - freshness: how the route's requests prove that they are fresh.
    /// - Throws: ``AppAttestProblem/missingAssertion`` without the fields, `malformed` when they do not decode.
    public init(request: HTTPRequest, bodySHA256: [UInt8], freshness: AppAttestFreshness) throws(AppAttestProblem) {
        let fields = request.headerFields
        guard let keyText = fields[AppAttestHTTPHeaders.keyID],
            let assertionText = fields[AppAttestHTTPHeaders.assertion]
        else { throw .missingAssertion }
        guard let keyID = try? KeyID(base64Encoded: keyText),
            let assertion = RequestBindingLayout.decodeBase64(assertionText, limit: AssertionObject.maximumSize)
        else { throw .malformed("App Attest headers are malformed") }
        let proof: Proof
        switch freshness.mode {
        case .challenge, .nextChallenge:
            guard let text = fields[AppAttestHTTPHeaders.challenge] else { throw .missingAssertion }
            guard
                let challenge = RequestBindingLayout.decodeBase64URL(
                    text, limit: AppAttestHTTPLimits.maximumChallengeLength)
            else { throw .malformed("App Attest headers are malformed") }
            proof = .challenge(challenge)
        case .timestamp:
            guard let text = fields[AppAttestHTTPHeaders.timestamp] else { throw .missingAssertion }
            guard text.utf8.count <= 16, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
                let milliseconds = Int64(text)
            else { throw .malformed("App-Attest-Timestamp is not milliseconds") }
            proof = .timestamp(milliseconds: milliseconds)
        }
        self.init(
            keyID: keyID, assertion: assertion,
            binding: .request(
                method: request.method.rawValue, pathAndQuery: request.path ?? "", bodySHA256: bodySHA256, proof: proof
            ),
            issuesNextChallenge: freshness.mode == .nextChallenge)
    }

    /// The assertion described by the JSON of `appattest serve`'s verification operation: the keyId and assertion,
    /// and either the opaque client data (with the challenge it begins with, if any) or the parts of a request to
    /// bind canonically (`openapi.yaml`, `AssertionVerification`).
    /// - Throws: `malformed` when the body is not that JSON or a field does not decode.
    public init(json body: some Collection<UInt8>) throws(AppAttestProblem) {
        guard let request = JSONBody(plain: body) ?? AppAttestHTTPOperations.decode(JSONBody.self, body) else {
            throw .malformed("Expected keyId, assertion, and clientData or request")
        }
        guard let keyID = try? KeyID(base64Encoded: request.keyId),
            let assertion = RequestBindingLayout.decodeBase64(request.assertion, limit: AssertionObject.maximumSize)
        else { throw .malformed("Expected keyId and assertion") }
        let binding: Binding
        switch (request.clientData, request.request) {
        case (let text?, nil):
            guard
                let data = RequestBindingLayout.decodeBase64(text, limit: AppAttestHTTPLimits.maximumClientDataLength)
            else { throw .malformed("clientData is not Base64 (at most 64 KiB)") }
            var challenge: [UInt8]?
            if let text = request.challenge {
                guard
                    let bytes = RequestBindingLayout.decodeBase64URL(
                        text, limit: AppAttestHTTPLimits.maximumChallengeLength)
                else { throw .malformed("challenge is not Base64URL") }
                challenge = bytes
            }
            binding = .opaque(clientData: data, challenge: challenge)
        case (nil, let bound?):
            guard request.challenge == nil, let hash = RequestBindingLayout.decodeBase64(bound.bodySha256, limit: 64)
            else { throw .malformed("request needs method, pathAndQuery and bodySha256") }
            switch (bound.challenge, bound.timestamp) {
            case (let text?, nil):
                guard
                    let bytes = RequestBindingLayout.decodeBase64URL(
                        text, limit: AppAttestHTTPLimits.maximumChallengeLength)
                else { throw .malformed("request.challenge is not Base64URL") }
                binding = .request(
                    method: bound.method, pathAndQuery: bound.pathAndQuery, bodySHA256: hash, proof: .challenge(bytes))
            case (nil, let milliseconds?):
                binding = .request(
                    method: bound.method, pathAndQuery: bound.pathAndQuery, bodySHA256: hash,
                    proof: .timestamp(milliseconds: milliseconds))
            default:
                throw .malformed("request needs exactly one of challenge and timestamp")
            }
        default:
            throw .malformed("Give exactly one of clientData and request")
        }
        self.init(
            keyID: keyID, assertion: assertion, binding: binding,
            issuesNextChallenge: request.issueNextChallenge == true)
    }

    /// The client data the app signed, rebuilt from the binding: the one place where it is built. A timestamp is
    /// checked here, before any verification work (it is bound by the signature, so it cannot be altered after).
    /// - Throws: `staleTimestamp` outside `timestampWindow` of `now`; `malformedBinding` (400) for a binding the
    ///   client data cannot hold.
    func clientData(timestampWindow: Duration, now: Date) throws(AppAttestProblem) -> AppAttestClientData {
        do {
            switch binding {
            case .opaque(let data, let challenge):
                return try AppAttestClientData.opaque(data, challenge: challenge)
            case .request(let method, let path, let hash, .challenge(let challenge)):
                return try AppAttestClientData.request(
                    method: method, pathAndQuery: path, bodySHA256: hash, challenge: challenge)
            case .request(let method, let path, let hash, .timestamp(let milliseconds)):
                let skew = abs(Double(milliseconds) / 1000 - now.timeIntervalSince1970)
                guard skew <= Double(timestampWindow.components.seconds) else { throw AppAttestProblem.staleTimestamp }
                return try AppAttestClientData.request(
                    method: method, pathAndQuery: path, bodySHA256: hash, timestampMilliseconds: milliseconds)
            }
        } catch let error as AppAttestError {
            throw AppAttestProblem(AppAttestServiceError(binding: error))
        } catch let problem as AppAttestProblem {
            throw problem
        } catch {
            throw AppAttestProblem(AppAttestServiceError(.malformedBinding, "\(error)"))
        }
    }

    /// The JSON of the verification operation.
    package struct JSONBody: Decodable, Equatable {
        package var keyId: String
        package var assertion: String
        package var clientData: String?
        package var challenge: String?
        package var request: BoundRequest?
        package var issueNextChallenge: Bool?

        package struct BoundRequest: Decodable, Equatable {
            package var method: String
            package var pathAndQuery: String
            package var bodySha256: String
            package var challenge: String?
            package var timestamp: Int64?
        }
    }
}
#endif  // HTTP
