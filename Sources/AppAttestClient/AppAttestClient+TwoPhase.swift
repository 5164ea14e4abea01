internal import AppAttestWire
public import Foundation

#if canImport(FoundationNetworking)
public import FoundationNetworking
#endif

/// A protected request signed by ``AppAttestClient/sign(_:isIdempotent:)``: send ``request`` with your HTTP stack,
/// then give its answer to ``AppAttestClient/complete(_:response:body:)``, which frees its turn and keeps what the
/// answer carries (or, if it was never sent, to ``AppAttestClient/abandon(_:)``).
public struct AppAttestSignedRequest: Sendable {
    /// The request with its App Attest header fields: send it exactly as it is.
    public let request: URLRequest

    /// The App Attest header fields the client added, by name: for a stack that sends its own request type.
    public var headerFields: [String: String] {
        var fields: [String: String] = [:]
        for name in [
            RequestBindingHeaders.keyID, RequestBindingHeaders.assertion, RequestBindingHeaders.challenge,
            RequestBindingHeaders.timestamp,
        ] {
            if let value = request.value(forHTTPHeaderField: name) { fields[name] = value }
        }
        return fields
    }

    let original: URLRequest
    let binding: AppAttestClient.RequestParts
    let keyID: String
    let ticket: Int
    let resendable: Bool
    let attempt: AppAttestClient.RequestAttempt
    let started: Date
}

/// What to do with an answer, as ``AppAttestClient/complete(_:response:body:)`` reads it.
public enum AppAttestCompletion: Sendable {
    /// The answer is your route's (whatever its status): use it.
    case answered
    /// The server's App Attest layer refused the request and the client repaired what its `action` said: send this
    /// request in its place, and complete (or abandon) it in turn. It is signed again, or, for a request that may not
    /// run twice told to come back (`retry`), it is the same signed request, which kept its turn while it waited.
    case resend(AppAttestSignedRequest)
}

extension AppAttestClient {
    // MARK: Two phases, for any HTTP stack

    /// Signs `request` for your own HTTP stack, registering the key first if needed and waiting for the request's
    /// turn (``AppAttestClientConcurrency``). Send ``AppAttestSignedRequest/request`` as it is, then call
    /// ``complete(_:response:body:)`` with the answer, or ``abandon(_:)`` if it could not be sent: until then the
    /// request holds its turn. ``data(for:isIdempotent:)`` is these two phases around the client's transport.
    /// - Parameters:
    ///   - request: the request, with its body in `httpBody`.
    ///   - isIdempotent: whether the request may run twice; nil takes it from the method.
    /// - Throws: ``AppAttestClientError``.
    public func sign(_ request: URLRequest, isIdempotent: Bool? = nil) async throws(AppAttestClientError)
        -> AppAttestSignedRequest
    {
        let binding = try RequestParts(request)
        let resendable =
            isIdempotent ?? Self.idempotentMethods.contains(binding.method)
            || configuration.resendsNonIdempotentRequests
        return try await signed(
            request, binding, resendable: resendable, attempt: RequestAttempt(), started: Date())
    }

    /// Reads the answer to a signed request: frees its turn, keeps the next challenge it carries, and, for a refusal
    /// of the App Attest layer, does what its `action` says.
    /// - Returns: ``AppAttestCompletion/answered`` for your route's answer; ``AppAttestCompletion/resend(_:)`` with
    ///   the request signed again when a refusal was repaired.
    /// - Throws: ``AppAttestClientError`` for a refusal that cannot or must not be repaired
    ///   (``AppAttestClientError/Code/requestRefused``, ``AppAttestClientError/Code/requestMayHaveRun``,
    ///   ``AppAttestClientError/Code/deferred``).
    public func complete(_ signed: AppAttestSignedRequest, response: HTTPURLResponse, body: Data)
        async throws(AppAttestClientError) -> AppAttestCompletion
    {
        let refusal = Self.refusal(for: response, body)
        // A request that must not run twice, told to wait and come back, goes back as it was signed, in its turn
        // (kept meanwhile, so that no later signature passes it): the answer may be a duplicate delivery's, its
        // first delivery accepted and run, and then the server refuses this one as a replay, where a new signature
        // would run it again.
        let sentAgainAsSigned = refusal?.action == "retry" && !signed.resendable
        if !sentAgainAsSigned { release(signed.ticket) }
        keepNextChallenge(from: response, keyID: signed.keyID)
        guard let refusal else {
            emit(
                AppAttestClientEvent(
                    .answered, keyID: signed.keyID, status: response.statusCode,
                    latency: Date().timeIntervalSince(signed.started)))
            return .answered
        }
        var attempt = signed.attempt
        do {
            try await recover(from: refusal, keyID: signed.keyID, resendable: signed.resendable, attempt: &attempt)
            // A deferral another request kept meanwhile holds this one too.
            if sentAgainAsSigned { try checkServerDeferral() }
        } catch {
            guard sentAgainAsSigned else { throw published(error) }
            release(signed.ticket)
            // Given up (out of retries, or a wait too long): an earlier delivery may have run it, so the app must not
            // send it again as new. The wait the server asked for, if any, stays with the error.
            guard [.deferred, .requestRefused].contains(error.code) else { throw published(error) }
            throw published(
                AppAttestClientError(
                    .requestMayHaveRun,
                    "refused with \(refusal.code) and not sent again: an earlier delivery may have run it",
                    status: error.status ?? refusal.status, problemCode: error.problemCode ?? refusal.code,
                    action: error.action ?? refusal.action, retryAfter: error.retryAfter))
        }
        emit(AppAttestClientEvent(.repaired, keyID: signed.keyID, code: refusal.code, status: refusal.status))
        if sentAgainAsSigned {
            return .resend(
                AppAttestSignedRequest(
                    request: signed.request, original: signed.original, binding: signed.binding,
                    keyID: signed.keyID, ticket: signed.ticket, resendable: false, attempt: attempt,
                    started: signed.started))
        }
        return .resend(
            try await self.signed(
                signed.original, signed.binding, resendable: signed.resendable, attempt: attempt,
                started: signed.started))
    }

    /// Frees the turn of a signed request that was not sent, or whose answer never came.
    public func abandon(_ signed: AppAttestSignedRequest) {
        release(signed.ticket)
    }

    /// `request` signed with the key, once its turn came; a key that fails on the device is replaced first (once per
    /// request).
    private func signed(
        _ request: URLRequest, _ binding: RequestParts, resendable: Bool, attempt: RequestAttempt,
        started: Date
    ) async throws(AppAttestClientError) -> AppAttestSignedRequest {
        var attempt = attempt
        while true {
            guard !Task.isCancelled else { throw AppAttestClientError(.transport, "cancelled") }
            let keyID = try await register()
            // The turn first: a challenge is fetched only for a request that will be sent now, so that the
            // challenges outstanding never exceed the requests in flight.
            let ticket = try await admit()
            let signedRequest: URLRequest?
            do {
                // Here, once its turn came: a request that queued, or is sent again, before a deferral ended.
                try checkServerDeferral()
                let challenge = try await proofChallenge(keyID: keyID)
                signedRequest = try await sign(
                    request, binding, keyID: keyID, challenge: challenge, ticket: ticket, attempt: &attempt)
            } catch {
                release(ticket)
                // The challenge route refused the key itself: the server has it no more (a restored database, a key
                // deleted) or revoked it. Kept, it would be refused on every request, so a new one is registered, as
                // for a protected route's refusal (``recover(from:keyID:resendable:attempt:)``): once per request,
                // within the day's replacements.
                guard error.code == .registrationRefused, let code = error.problemCode else { throw error }
                guard !attempt.replacedKey, replacesKey(code: code, action: error.action) else {
                    // Any other refusal of the key's challenge is this request's, as a protected route's would be
                    // (`keyRevoked`, say): not a registration's.
                    throw AppAttestClientError(
                        .requestRefused, "the server's App Attest layer refused the key's challenge: \(code)",
                        status: error.status, problemCode: code, action: error.action)
                }
                attempt.replacedKey = true
                do { try await replaceKey(keyID, reason: code) } catch {
                    throw published(error)
                }
                continue
            }
            guard let signedRequest else {
                release(ticket)
                continue
            }
            return AppAttestSignedRequest(
                request: signedRequest, original: request, binding: binding, keyID: keyID, ticket: ticket,
                resendable: resendable, attempt: attempt, started: started)
        }
    }
}
