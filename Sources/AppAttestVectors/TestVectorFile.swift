public import AppAttest
public import Foundation

/// A file of App Attest test vectors in the format of TestVectors/README.md (version 1).
///
/// One vector that cannot be read does not stop the others: it is kept as ``TestVectorFile/Entry/unreadable``
/// and fails when run, with the reason it could not be read.
public struct TestVectorFile: Sendable {
    /// `app-attest-test-vectors`.
    public static let formatName = "app-attest-test-vectors"
    /// The largest file read, a guard against feeding the command something that is not a vector file.
    public static let maximumFileSize = 64 * 1024 * 1024

    public var description: String?
    /// The root the attestation vectors chain to: Apple's unless the file carries `trustAnchorCertificate`.
    public var trustAnchor: TrustAnchor
    /// The file's entries, in order: vectors, and entries this version does not understand.
    public var entries: [Entry]

    /// A vector, or the reason it could not be read.
    public enum Entry: Sendable {
        case vector(TestVector)
        case unreadable(id: String, reason: String)

        /// The entry's identifier.
        public var id: String {
            switch self {
            case .vector(let vector): return vector.id
            case .unreadable(let id, _): return id
            }
        }
    }

    /// Why a file is not a vector file at all.
    public struct FormatError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Parses a vector file.
    /// - Throws: ``FormatError`` when the top level is not a version-1 vector file.
    public init(jsonData data: Data) throws(FormatError) {
        guard data.count <= Self.maximumFileSize else {
            throw FormatError(description: "file of \(data.count) bytes exceeds \(Self.maximumFileSize)")
        }
        let raw: RawFile
        do { raw = try JSONDecoder().decode(RawFile.self, from: data) } catch {
            throw FormatError(description: "not a vector file: \(error)")
        }
        guard raw.format == Self.formatName else {
            throw FormatError(description: "format is \"\(raw.format)\", not \"\(Self.formatName)\"")
        }
        guard raw.version == 1 else { throw FormatError(description: "format version \(raw.version) is not supported") }
        description = raw.description
        if let anchor = raw.trustAnchorCertificate {
            guard let der = Data(base64Encoded: anchor) else {
                throw FormatError(description: "trustAnchorCertificate is not Base64 of a DER certificate")
            }
            trustAnchor = .customRootForTesting(derRepresentation: Array(der))
        } else {
            trustAnchor = .appleAppAttestationRoot
        }
        var seen = Set<String>()
        entries = raw.vectors.enumerated().map { index, lenient in
            switch lenient.result {
            case .success(let vector):
                guard seen.insert(vector.id).inserted else {
                    return .unreadable(id: vector.id, reason: "duplicate id")
                }
                return .vector(vector)
            case .failure(let failure):
                return .unreadable(id: lenient.id ?? "#\(index)", reason: failure.reason)
            }
        }
    }

    private struct RawFile: Decodable {
        var format: String
        var version: Int
        var description: String?
        var trustAnchorCertificate: String?
        var vectors: [LenientVector]
    }

    private struct LenientVector: Decodable {
        var id: String?
        var result: Result<TestVector, ReadFailure>

        struct ReadFailure: Error { var reason: String }
        private struct IDOnly: Decodable { var id: String? }

        init(from decoder: any Decoder) throws {
            id = try? IDOnly(from: decoder).id
            do { result = .success(try TestVector(from: decoder)) } catch let error as DecodingError {
                result = .failure(ReadFailure(reason: Self.describe(error)))
            } catch {
                result = .failure(ReadFailure(reason: "\(error)"))
            }
        }

        static func describe(_ error: DecodingError) -> String {
            switch error {
            case .keyNotFound(let key, _): return "missing field \(key.stringValue)"
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
                let path = context.codingPath.map(\.stringValue).joined(separator: ".")
                return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
            @unknown default: return "\(error)"
            }
        }
    }
}

/// One vector: an attestation or an assertion with the outcome the library must produce.
public struct TestVector: Sendable, Decodable {
    /// What a vector holds: an attestation or an assertion.
    public enum Kind: String, Sendable, Decodable { case attestation, assertion }

    /// The outcome a vector expects.
    public enum Expectation: Sendable, Equatable, Decodable, CustomStringConvertible {
        /// Valid; for an assertion, with the counter to store afterwards.
        case valid(counter: UInt32?)
        /// Rejected with one of these reasons.
        case invalid(reasons: [String])

        private enum CodingKeys: String, CodingKey { case result, counter, reasons }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            switch try container.decode(String.self, forKey: .result) {
            case "valid": self = .valid(counter: try container.decodeIfPresent(UInt32.self, forKey: .counter))
            case "invalid":
                let reasons = try container.decode([String].self, forKey: .reasons)
                guard !reasons.isEmpty else {
                    throw DecodingError.dataCorruptedError(
                        forKey: .reasons, in: container, debugDescription: "no reason listed")
                }
                self = .invalid(reasons: reasons)
            case let other:
                throw DecodingError.dataCorruptedError(
                    forKey: .result, in: container, debugDescription: "unknown result \(other)")
            }
        }

        public var description: String {
            switch self {
            case .valid(let counter): return counter.map { "valid(counter \($0))" } ?? "valid"
            case .invalid(let reasons): return "invalid(\(reasons.joined(separator: "|")))"
            }
        }
    }

    /// The vector's identifier, named in every failure.
    public var id: String
    /// Attestation or assertion.
    public var kind: Kind
    /// The App ID the object was made for.
    public var appID: AppID
    /// The expected outcome.
    public var expect: Expectation

    /// Attestation fields.
    public var attestation: [UInt8]?
    /// The key identifier (attestations).
    public var keyID: KeyID?
    /// The exact clientDataHash given to `attestKey`, when the file gives it instead of a challenge.
    public var clientDataHash: [UInt8]?
    /// The challenge whose SHA-256 is the clientDataHash.
    public var challenge: [UInt8]?
    /// The environment the verifier allows.
    public var environment: AppAttestEnvironment?
    /// When the object verifies (recorded leaves expire within days).
    public var verifyAt: Date?

    /// Assertion fields.
    public var assertion: [UInt8]?
    /// The exact client data the app hashed (assertions).
    public var clientData: [UInt8]?
    /// The attested public key, as a 65-byte point (assertions).
    public var publicKey: [UInt8]?
    /// The stored counter before this assertion.
    public var previousCounter: UInt32?

    private enum CodingKeys: String, CodingKey {
        case id, kind, appId, expect, attestation, keyId, clientDataHash, challenge, environment, verifyAt
        case assertion, clientData, publicKey, previousCounter
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        kind = try c.decode(Kind.self, forKey: .kind)
        appID = try c.decode(AppID.self, forKey: .appId)
        expect = try c.decode(Expectation.self, forKey: .expect)
        func bytes(_ key: CodingKeys) throws -> [UInt8]? {
            guard let text = try c.decodeIfPresent(String.self, forKey: key) else { return nil }
            guard let data = Data(base64Encoded: text) else {
                throw DecodingError.dataCorruptedError(forKey: key, in: c, debugDescription: "not standard Base64")
            }
            return Array(data)
        }
        func required(_ key: CodingKeys) throws -> [UInt8] {
            guard let value = try bytes(key) else {
                throw DecodingError.keyNotFound(
                    key, .init(codingPath: c.codingPath, debugDescription: "required for \(kind)"))
            }
            return value
        }
        switch kind {
        case .attestation:
            attestation = try required(.attestation)
            keyID = try c.decode(KeyID.self, forKey: .keyId)
            clientDataHash = try required(.clientDataHash)
            challenge = try bytes(.challenge)
            if let challenge, AppAttestSHA256.hash(challenge) != clientDataHash {
                throw DecodingError.dataCorruptedError(
                    forKey: .challenge, in: c, debugDescription: "clientDataHash is not SHA-256 of challenge")
            }
            environment = try c.decode(AppAttestEnvironment.self, forKey: .environment)
            let instant = try c.decode(String.self, forKey: .verifyAt)
            guard let date = Self.parseInstant(instant) else {
                throw DecodingError.dataCorruptedError(
                    forKey: .verifyAt, in: c, debugDescription: "not an ISO 8601 instant")
            }
            verifyAt = date
        case .assertion:
            assertion = try required(.assertion)
            clientData = try required(.clientData)
            publicKey = try required(.publicKey)
            keyID = try c.decodeIfPresent(KeyID.self, forKey: .keyId)
            previousCounter = try c.decode(UInt32.self, forKey: .previousCounter)
        }
    }

    /// ISO 8601 with or without fractional seconds, e.g. `2020-11-21T22:13:02Z`.
    static func parseInstant(_ text: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: text)
    }
}
