internal import AppAttestCrypto
internal import Foundation

/// An App ID: `<TeamID>.<bundle identifier>`, whose SHA-256 is the rpIdHash in authenticator data
/// (<doc:VerifyingAttestations>).
///
/// App Clips use the full app's App ID (<doc:VerifyingAttestations>).
public struct AppID: Hashable, Sendable, CustomStringConvertible, Codable {
    /// The whole App ID string.
    public let rawValue: String
    /// SHA-256 of the UTF-8 App ID, as it appears in authenticator data.
    public let rpIDHash: [UInt8]

    /// The 10-character Team ID (the App ID prefix).
    public var teamID: Substring { rawValue.prefix { $0 != "." } }
    /// The bundle identifier after the first dot.
    public var bundleID: Substring { rawValue.drop { $0 != "." }.dropFirst() }

    /// - Parameters:
    ///   - teamID: the 10-character Team ID, letters and digits.
    ///   - bundleID: the bundle identifier, e.g. `com.example.app`.
    /// - Throws: ``AppAttestError/Code/invalidConfiguration`` when either part is not of that shape.
    public init(teamID: String, bundleID: String) throws(AppAttestError) {
        try self.init("\(teamID).\(bundleID)")
    }

    /// Parses `TEAMID.bundle.id`.
    /// - Throws: ``AppAttestError/Code/invalidConfiguration`` when the Team ID is not 10 letters or digits or
    ///   the bundle identifier is empty or not printable ASCII.
    public init(_ string: String) throws(AppAttestError) {
        let parts = string.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count == 10,
            parts[0].utf8.allSatisfy({
                (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
            })
        else {
            throw AppAttestError(.invalidConfiguration, "an App ID is a 10-character Team ID, a dot and a bundle ID")
        }
        guard !parts[1].isEmpty, parts[1].utf8.count <= 255, parts[1].utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else {
            throw AppAttestError(
                .invalidConfiguration, "the bundle ID of an App ID must be 1–255 printable ASCII characters")
        }
        rawValue = string
        rpIDHash = SHA256.hash(Array(string.utf8))
    }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let string = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(string) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.reason))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public static func == (lhs: AppID, rhs: AppID) -> Bool { lhs.rawValue == rhs.rawValue }
    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }
}

/// The App Attest environment of a key, carried in the AAGUID (<doc:VerifyingAttestations>).
public enum AppAttestEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    /// Keys from builds that use the sandbox: AAGUID `appattestdevelop`.
    case development
    /// Keys from TestFlight, App Store and Enterprise builds: AAGUID `appattest` followed by seven zero bytes.
    case production

    /// The 16-byte AAGUID that marks this environment.
    public var aaguid: [UInt8] {
        switch self {
        case .development: return Array("appattestdevelop".utf8)
        case .production: return Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        }
    }

    /// The environment an AAGUID names, or nil for any other value.
    public init?(aaguid: some Collection<UInt8>) {
        let bytes = Array(aaguid)
        guard let match = Self.allCases.first(where: { $0.aaguid == bytes }) else { return nil }
        self = match
    }
}

/// The identifier of an App Attest key: SHA-256 of its 65-byte uncompressed public point (<doc:VerifyingAttestations>).
///
/// Apps receive it from `generateKey` as standard Base64 with padding (44 characters).
public struct KeyID: Hashable, Sendable, CustomStringConvertible, Codable {
    /// The 32 raw bytes.
    public let rawValue: [UInt8]

    /// - Throws: ``AppAttestError/Code/malformed`` unless there are exactly 32 bytes.
    public init(rawValue: some Collection<UInt8>) throws(AppAttestError) {
        guard rawValue.count == 32 else {
            throw AppAttestError(.malformed, "a keyId has 32 bytes, not \(rawValue.count)")
        }
        self.rawValue = Array(rawValue)
    }

    /// Decodes a keyId in either spelling a client may send: standard Base64 (what `generateKey` returns) or
    /// Base64URL, with its padding `=` or without (44 or 43 characters). Keys are compared as bytes, so every
    /// spelling of one keyId names the same key (<doc:VerifyingAttestations>).
    /// - Throws: ``AppAttestError/Code/malformed`` when the text is not 32 bytes in one of those spellings (the two
    ///   alphabets mixed in one text, for instance).
    public init(base64Encoded text: String) throws(AppAttestError) {
        var bytes = Array(text.utf8)
        guard bytes.count == 43 || (bytes.count == 44 && bytes[43] == UInt8(ascii: "=")) else {
            throw AppAttestError(.malformed, "a keyId is 43 or 44 characters of Base64 or Base64URL")
        }
        var standard = false
        var url = false
        for index in bytes.indices {
            switch bytes[index] {
            case UInt8(ascii: "+"), UInt8(ascii: "/"): standard = true
            case UInt8(ascii: "-"):
                url = true
                bytes[index] = UInt8(ascii: "+")
            case UInt8(ascii: "_"):
                url = true
                bytes[index] = UInt8(ascii: "/")
            default: break
            }
        }
        if bytes.count == 43 { bytes.append(UInt8(ascii: "=")) }
        // The 43rd character carries 4 bits of the key and 2 unused bits, which must be zero: one spelling per key
        // and alphabet, so that nothing keyed on the text (a proxy's rate limit, a log) sees one key as several.
        let last = bytes[42]
        let value: UInt8? =
            switch last {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): last - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): last - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): last - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): 62
            case UInt8(ascii: "/"): 63
            default: nil
            }
        guard !(standard && url), let value, value & 0x03 == 0, let data = Data(base64Encoded: Data(bytes)) else {
            throw AppAttestError(.malformed, "a keyId is 43 or 44 characters of Base64 or Base64URL")
        }
        try self.init(rawValue: data)
    }

    init(unchecked bytes: [UInt8]) { rawValue = bytes }

    /// 32 zero bytes: the identifier of no key in practice (it would take a point whose SHA-256 is zero), for probes.
    package static let unassigned = KeyID(unchecked: [UInt8](repeating: 0, count: 32))

    /// Hashes the 32 bytes at once (the synthesized hash feeds them one by one; keys are looked up on every
    /// verification).
    public func hash(into hasher: inout Hasher) {
        rawValue.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// Standard Base64 with padding, as Apple's `generateKey` returns it.
    public var base64EncodedString: String { Data(rawValue).base64EncodedString() }

    /// Lowercase hex, as in the credCert subject CN.
    public var hexString: String { rawValue.hexString }

    public var description: String { base64EncodedString }

    public init(from decoder: any Decoder) throws {
        let string = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(base64Encoded: string) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.reason))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(base64EncodedString)
    }
}

extension Sequence<UInt8> {
    /// Lowercase hexadecimal.
    package var hexString: String {
        var text = ""
        for byte in self {
            text.append(Character(Unicode.Scalar(hexDigits[Int(byte >> 4)])))
            text.append(Character(Unicode.Scalar(hexDigits[Int(byte & 0x0F)])))
        }
        return text
    }
}

private let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
